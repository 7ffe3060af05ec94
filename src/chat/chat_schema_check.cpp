// JSON Schema validation of non-strict tool parameters and response formats: the keyword types of the draft
// 2020-12 meta-schema, local $ref targets and regex syntax (what the jsonschema crate checks for
// deepseek-recipe when it compiles a schema offline).
#include "chat/chat_schema.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>
#include <cmath>
#include <string_view>
#include <set>
#include <vector>

namespace dsinfer::chat {
namespace {

enum class Kind {
  kSchema,          // object or boolean, validated recursively
  kSchemaMap,       // object of schemas
  kSchemaArray,     // non-empty array of schemas
  kType,            // simple type name or non-empty array of unique ones
  kArray,           // any array
  kNumber,
  kPositiveNumber,  // number > 0
  kNonNegInt,       // integral number >= 0
  kRegex,           // string that compiles as a regex
  kBool,
  kString,
  kUniqueStrings,   // array of unique strings
  kStringArrayMap,  // object of unique-string arrays
  kDependencies,    // object of schemas or unique-string arrays
  kBoolMap,         // object of booleans ($vocabulary)
};

struct Keyword {
  const char* name;
  Kind kind;
};

constexpr Keyword kKeywords[] = {
    {"additionalProperties", Kind::kSchema}, {"propertyNames", Kind::kSchema}, {"items", Kind::kSchema},
    {"contains", Kind::kSchema}, {"not", Kind::kSchema}, {"if", Kind::kSchema}, {"then", Kind::kSchema},
    {"else", Kind::kSchema}, {"unevaluatedItems", Kind::kSchema}, {"unevaluatedProperties", Kind::kSchema},
    {"contentSchema", Kind::kSchema}, {"properties", Kind::kSchemaMap}, {"patternProperties", Kind::kSchemaMap},
    {"$defs", Kind::kSchemaMap}, {"definitions", Kind::kSchemaMap}, {"dependentSchemas", Kind::kSchemaMap},
    {"allOf", Kind::kSchemaArray}, {"anyOf", Kind::kSchemaArray}, {"oneOf", Kind::kSchemaArray},
    {"prefixItems", Kind::kSchemaArray}, {"type", Kind::kType}, {"enum", Kind::kArray}, {"examples", Kind::kArray},
    {"multipleOf", Kind::kPositiveNumber}, {"maximum", Kind::kNumber}, {"exclusiveMaximum", Kind::kNumber},
    {"minimum", Kind::kNumber}, {"exclusiveMinimum", Kind::kNumber}, {"maxLength", Kind::kNonNegInt},
    {"minLength", Kind::kNonNegInt}, {"maxItems", Kind::kNonNegInt}, {"minItems", Kind::kNonNegInt},
    {"maxContains", Kind::kNonNegInt}, {"minContains", Kind::kNonNegInt}, {"maxProperties", Kind::kNonNegInt},
    {"minProperties", Kind::kNonNegInt}, {"pattern", Kind::kRegex}, {"uniqueItems", Kind::kBool},
    {"deprecated", Kind::kBool}, {"readOnly", Kind::kBool}, {"writeOnly", Kind::kBool}, {"title", Kind::kString},
    {"description", Kind::kString}, {"$comment", Kind::kString}, {"format", Kind::kString},
    {"contentEncoding", Kind::kString}, {"contentMediaType", Kind::kString}, {"$id", Kind::kString},
    {"$schema", Kind::kString}, {"$ref", Kind::kString}, {"$anchor", Kind::kString},
    {"$dynamicRef", Kind::kString}, {"$dynamicAnchor", Kind::kString}, {"required", Kind::kUniqueStrings},
    {"dependentRequired", Kind::kStringArrayMap}, {"dependencies", Kind::kDependencies},
    {"$vocabulary", Kind::kBoolMap},
};

bool valid_regex(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF, &err, &off, nullptr);
  if (!re) return false;
  pcre2_code_free(re);
  return true;
}

bool unique_strings(const ojson& v) {
  if (!v.is_array()) return false;
  std::set<std::string> seen;
  for (const ojson& s : v)
    if (!s.is_string() || !seen.insert(s.get<std::string>()).second) return false;
  return true;
}

struct Checker {
  const ojson& root;
  bool legacy = false;  // draft 4 / 6 / 7: "items" may be an array, exclusive bounds may be booleans

  Status fail(const std::string& where, const ojson& v, const char* what) const {
    return Status::errorf("{}: {} {}", where, v.dump(-1, ' ', false, ojson::error_handler_t::replace).substr(0, 200), what);
  }

  Status schema(const ojson& s, const std::string& where) const {
    if (s.is_boolean()) return Status::ok();
    if (!s.is_object()) return fail(where, s, "is not a schema (an object or a boolean)");
    for (const Keyword& k : kKeywords)
      if (s.contains(k.name)) DSI_RETURN_IF_ERROR(keyword(k, s[k.name], where + "." + k.name));
    if (s.contains("$ref")) DSI_RETURN_IF_ERROR(ref(s["$ref"].get<std::string>(), where + ".$ref"));
    return Status::ok();
  }

  Status keyword(const Keyword& k, const ojson& v, const std::string& where) const {
    static const std::set<std::string> kTypes = {"array", "boolean", "integer", "null", "number", "object", "string"};
    switch (k.kind) {
      case Kind::kSchema:
        if (legacy && std::string_view(k.name) == "items" && v.is_array()) {
          for (size_t i = 0; i < v.size(); ++i) DSI_RETURN_IF_ERROR(schema(v[i], fmt::format("{}[{}]", where, i)));
          return Status::ok();
        }
        return schema(v, where);
      case Kind::kSchemaMap:
        if (!v.is_object()) return fail(where, v, "is not an object");
        for (auto it = v.begin(); it != v.end(); ++it) {
          if (std::string_view(k.name) == "patternProperties" && !valid_regex(it.key()))
            return Status::errorf("{}: {:?} is not a valid regex", where, it.key());
          DSI_RETURN_IF_ERROR(schema(it.value(), where + "." + it.key()));
        }
        return Status::ok();
      case Kind::kSchemaArray:
        if (!v.is_array() || v.empty()) return fail(where, v, "is not a non-empty array of schemas");
        for (size_t i = 0; i < v.size(); ++i) DSI_RETURN_IF_ERROR(schema(v[i], fmt::format("{}[{}]", where, i)));
        return Status::ok();
      case Kind::kType: {
        if (v.is_string() && kTypes.count(v.get<std::string>())) return Status::ok();
        bool ok = unique_strings(v) && !v.empty();
        for (size_t i = 0; ok && i < v.size(); ++i) ok = kTypes.count(v[i].get<std::string>()) > 0;
        return ok ? Status::ok() : fail(where, v, "is not a JSON Schema type name or a non-empty array of unique ones");
      }
      case Kind::kArray: return v.is_array() ? Status::ok() : fail(where, v, "is not an array");
      case Kind::kNumber:
        if (legacy && v.is_boolean()) return Status::ok();
        return v.is_number() ? Status::ok() : fail(where, v, "is not a number");
      case Kind::kPositiveNumber:
        return v.is_number() && v.get<double>() > 0 ? Status::ok() : fail(where, v, "is not a number greater than 0");
      case Kind::kNonNegInt: {
        const bool ok = v.is_number() && v.get<double>() >= 0 && std::floor(v.get<double>()) == v.get<double>();
        return ok ? Status::ok() : fail(where, v, "is not a non-negative integer");
      }
      case Kind::kRegex:
        if (!v.is_string()) return fail(where, v, "is not a string");
        return valid_regex(v.get<std::string>()) ? Status::ok() : fail(where, v, "is not a valid regex");
      case Kind::kBool: return v.is_boolean() ? Status::ok() : fail(where, v, "is not a boolean");
      case Kind::kString: return v.is_string() ? Status::ok() : fail(where, v, "is not a string");
      case Kind::kUniqueStrings: return unique_strings(v) ? Status::ok() : fail(where, v, "is not an array of unique strings");
      case Kind::kStringArrayMap:
      case Kind::kDependencies:
      case Kind::kBoolMap:
        if (!v.is_object()) return fail(where, v, "is not an object");
        for (auto it = v.begin(); it != v.end(); ++it) {
          const std::string w = where + "." + it.key();
          if (k.kind == Kind::kBoolMap) {
            if (!it.value().is_boolean()) return fail(w, it.value(), "is not a boolean");
          } else if (k.kind == Kind::kDependencies && !it.value().is_array()) {
            DSI_RETURN_IF_ERROR(schema(it.value(), w));
          } else if (!unique_strings(it.value())) {
            return fail(w, it.value(), "is not an array of unique strings");
          }
        }
        return Status::ok();
    }
    return Status::ok();
  }

  static bool has_anchor(const ojson& v, const std::string& name) {
    if (v.is_object()) {
      if (v.contains("$anchor") && v["$anchor"] == name) return true;
      for (auto it = v.begin(); it != v.end(); ++it)
        if (has_anchor(it.value(), name)) return true;
    } else if (v.is_array()) {
      for (const ojson& e : v)
        if (has_anchor(e, name)) return true;
    }
    return false;
  }

  // Only references into this document resolve: remote retrieval is off and there is no base URI.
  Status ref(const std::string& r, const std::string& where) const {
    if (r.empty() || r[0] != '#')
      return Status::errorf("{}: {:?} cannot be resolved (only references into the schema itself, \"#...\", are allowed)", where, r);
    if (r.size() > 1 && r[1] != '/') {
      if (!has_anchor(root, r.substr(1))) return Status::errorf("{}: anchor {:?} does not exist", where, r.substr(1));
      return Status::ok();
    }
    const ojson* cur = &root;
    size_t i = 1;
    while (i < r.size()) {
      size_t j = r.find('/', i + 1);
      std::string tok = r.substr(i + 1, j == std::string::npos ? std::string::npos : j - i - 1);
      std::string key;
      for (size_t k = 0; k < tok.size(); ++k) {
        if (tok[k] == '~' && k + 1 < tok.size() && (tok[k + 1] == '0' || tok[k + 1] == '1')) {
          key += tok[k + 1] == '0' ? '~' : '/';
          ++k;
        } else if (tok[k] == '%' && k + 2 < tok.size() && std::isxdigit(uint8_t(tok[k + 1])) && std::isxdigit(uint8_t(tok[k + 2]))) {
          key += char(std::stoi(tok.substr(k + 1, 2), nullptr, 16));
          k += 2;
        } else {
          key += tok[k];
        }
      }
      if (cur->is_object() && cur->contains(key)) {
        cur = &(*cur)[key];
      } else if (cur->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoull(key) < cur->size()) {
        cur = &(*cur)[std::stoull(key)];
      } else {
        return Status::errorf("{}: {:?} does not point into the schema", where, r);
      }
      if (j == std::string::npos) break;
      i = j;
    }
    return Status::ok();
  }
};

}  // namespace

Status validate_json_schema(const ojson& schema, const std::string& where) {
  Checker c{schema};
  if (schema.is_object() && schema.contains("$schema") && schema["$schema"].is_string()) {
    std::string s = schema["$schema"].get<std::string>();
    if (!s.empty() && s.back() == '#') s.pop_back();
    static const std::set<std::string> kModern = {"https://json-schema.org/draft/2020-12/schema",
                                                  "https://json-schema.org/draft/2019-09/schema"};
    static const std::set<std::string> kLegacy = {"http://json-schema.org/draft-07/schema", "http://json-schema.org/draft-06/schema",
                                                  "http://json-schema.org/draft-04/schema"};
    if (kLegacy.count(s)) c.legacy = true;
    else if (!kModern.count(s)) return Status::errorf("{}.$schema: unknown meta-schema {:?}", where, s);
  }
  return c.schema(schema, where);
}

}  // namespace dsinfer::chat
