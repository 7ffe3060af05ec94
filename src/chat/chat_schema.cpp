// Strict-schema normalisation and JSON Schema validation (see chat_schema.h).
#include "chat/chat_schema.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cmath>
#include <cstdint>
#include <set>

namespace dsinfer::chat {
namespace {

// ---- strict: deepseek-recipe's typed JsonSchema, read and normalised in one pass ----

bool given(const ojson& o, const char* key) { return o.contains(key) && !o[key].is_null(); }

// serde Option<String>: absent or null -> not copied; a string -> copied; anything else -> error.
Status copy_string(const ojson& in, const char* key, const std::string& where, ojson& out) {
  if (!given(in, key)) return Status::ok();
  if (!in[key].is_string()) return Status::errorf("{}.{}: expected a string, got {}", where, key, in[key].dump());
  out[key] = in[key];
  return Status::ok();
}

Status copy_number(const ojson& in, const char* key, bool integer, const std::string& where, ojson& out) {
  if (!given(in, key)) return Status::ok();
  const ojson& v = in[key];
  const bool ok = integer ? v.is_number_integer() && (!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t(INT64_MAX))
                          : v.is_number();
  if (!ok) return Status::errorf("{}.{}: expected {}, got {}", where, key, integer ? "an i64 integer" : "a number", v.dump());
  out[key] = v;
  return Status::ok();
}

Result<ojson> strict_node(const ojson& v, bool allow_empty, const std::string& where);

Result<ojson> strict_object(const ojson& v, bool allow_empty, const std::string& where) {
  ojson props = ojson::object();
  if (given(v, "properties")) {
    if (!v["properties"].is_object()) return Status::errorf("{}.properties: expected an object", where);
    for (auto it = v["properties"].begin(); it != v["properties"].end(); ++it) {
      DSI_ASSIGN_OR_RETURN(ojson p, strict_node(it.value(), false, where + ".properties." + it.key()));
      props[it.key()] = std::move(p);
    }
  }
  bool additional = false;
  if (given(v, "additionalProperties")) {
    if (!v["additionalProperties"].is_boolean())
      return Status::errorf("{}.additionalProperties: expected a boolean (strict schemas take no schema here)", where);
    additional = v["additionalProperties"].get<bool>();
  }
  ojson def;
  if (given(v, "$def")) {
    if (!v["$def"].is_object()) return Status::errorf("{}.$def: expected an object", where);
    def = ojson::object();
    for (auto it = v["$def"].begin(); it != v["$def"].end(); ++it) {
      DSI_ASSIGN_OR_RETURN(ojson p, strict_node(it.value(), false, where + ".$def." + it.key()));
      def[it.key()] = std::move(p);
    }
  }
  if (!allow_empty && props.empty()) return Status::errorf("{}: an object with no properties is not allowed in a strict schema", where);
  if (given(v, "required")) {
    const ojson& req = v["required"];
    if (!req.is_array()) return Status::errorf("{}.required: expected an array of strings", where);
    std::set<std::string> seen;
    for (const ojson& k : req) {
      if (!k.is_string()) return Status::errorf("{}.required: expected an array of strings", where);
      const std::string key = k.get<std::string>();
      if (!props.contains(key)) return Status::errorf("{}.required: property {:?} not found in the object", where, key);
      if (!seen.insert(key).second) return Status::errorf("{}.required: duplicate property {:?}", where, key);
    }
    if (seen.size() != props.size())
      return Status::errorf("{}.required must list every property of the object in a strict schema", where);
  }
  if (additional) return Status::errorf("{}.additionalProperties must not be true in a strict schema", where);
  ojson out = ojson::object();
  out["type"] = "object";
  ojson required = ojson::array();
  for (auto it = props.begin(); it != props.end(); ++it) required.push_back(it.key());
  out["properties"] = std::move(props);
  out["additionalProperties"] = false;
  out["required"] = std::move(required);
  DSI_RETURN_IF_ERROR(copy_string(v, "description", where, out));
  if (!def.is_null()) out["$def"] = std::move(def);
  return out;
}

// One JsonSchemaType: an object whose "type" names the variant.
Result<ojson> strict_typed(const ojson& v, bool allow_empty, const std::string& where) {
  if (!v.is_object() || !v.contains("type")) return Status::errorf("{}: expected a schema object with a \"type\"", where);
  if (!v["type"].is_string()) return Status::errorf("{}.type: expected a type name, got {}", where, v["type"].dump());
  const std::string t = v["type"].get<std::string>();
  if (t == "object") return strict_object(v, allow_empty, where);
  ojson out = ojson::object();
  out["type"] = t;
  if (t == "array") {
    if (!v.contains("items")) return Status::errorf("{}: an array schema needs \"items\" in a strict schema", where);
    DSI_ASSIGN_OR_RETURN(ojson items, strict_node(v["items"], false, where + ".items"));
    out["items"] = std::move(items);
    DSI_RETURN_IF_ERROR(copy_string(v, "description", where, out));
    return out;
  }
  DSI_RETURN_IF_ERROR(copy_string(v, "description", where, out));
  if (t == "string") {
    DSI_RETURN_IF_ERROR(copy_string(v, "pattern", where, out));
    if (given(v, "format")) {
      static const std::set<std::string> kFormats = {"email", "hostname", "ipv4", "ipv6", "uuid"};
      const ojson& f = v["format"];
      if (!f.is_string() || !kFormats.count(f.get<std::string>()))
        return Status::errorf("{}.format {} is not one of email, hostname, ipv4, ipv6, uuid (strict schema)", where, f.dump());
      out["format"] = f;
    }
    if (given(v, "enum")) {
      const ojson& e = v["enum"];
      bool ok = e.is_array();
      for (size_t i = 0; ok && i < e.size(); ++i) ok = e[i].is_string();
      if (!ok) return Status::errorf("{}.enum: expected an array of strings in a string schema", where);
      out["enum"] = e;
    }
  } else if (t == "number" || t == "integer") {
    for (const char* k : {"const", "default", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
      DSI_RETURN_IF_ERROR(copy_number(v, k, t == "integer", where, out));
  } else if (t != "boolean" && t != "null") {
    return Status::errorf("{}.type {:?} is not one of object, string, number, integer, boolean, array, null", where, t);
  }
  return out;
}

Result<ojson> strict_node(const ojson& v, bool allow_empty, const std::string& where) {
  if (v.is_object() && v.contains("type") && v["type"].is_array()) {
    static const std::set<std::string> kSimple = {"string", "number", "integer", "boolean", "null"};
    for (const ojson& t : v["type"])
      if (!t.is_string() || !kSimple.count(t.get<std::string>()))
        return Status::errorf("{}.type: {} is not one of string, number, integer, boolean, null", where, t.dump());
    ojson out = ojson::object();
    out["type"] = v["type"];
    DSI_RETURN_IF_ERROR(copy_string(v, "description", where, out));
    return out;
  }
  if (v.is_object() && v.contains("type")) return strict_typed(v, allow_empty, where);
  if (v.is_object() && v.contains("anyOf")) {
    if (!v["anyOf"].is_array()) return Status::errorf("{}.anyOf: expected an array", where);
    ojson items = ojson::array();
    for (size_t i = 0; i < v["anyOf"].size(); ++i) {
      DSI_ASSIGN_OR_RETURN(ojson s, strict_typed(v["anyOf"][i], allow_empty, fmt::format("{}.anyOf[{}]", where, i)));
      items.push_back(std::move(s));
    }
    ojson out = ojson::object();
    out["anyOf"] = std::move(items);
    DSI_RETURN_IF_ERROR(copy_string(v, "description", where, out));
    return out;
  }
  if (v.is_object() && v.contains("$ref")) {
    if (!v["$ref"].is_string()) return Status::errorf("{}.$ref: expected a string", where);
    ojson out = ojson::object();
    out["$ref"] = v["$ref"];
    return out;
  }
  return Status::errorf("{}: one of \"type\", \"anyOf\", \"$ref\" is required in a strict schema", where);
}

}  // namespace

Result<ojson> normalize_strict_schema(const ojson& schema, bool allow_empty_object, const std::string& where) {
  DSI_ASSIGN_OR_RETURN(ojson out, strict_node(schema, allow_empty_object, where));
  if (!(out.contains("type") && out["type"] == "object"))
    return Status::errorf("{}: the top level of a strict schema must be an object", where);
  return out;
}

}  // namespace dsinfer::chat
