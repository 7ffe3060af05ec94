// JSON Schema handling of tool parameters and json_schema response formats, as deepseek-recipe 0.2.0 converts
// them (protocol/json_schema.rs, validation.rs):
//  - strict (`"strict": true`): the schema is read as deepseek-recipe's typed JsonSchema (object / string /
//    number / integer / boolean / array / null, a `type` array, `anyOf`, or `$ref`; other keywords dropped) and
//    normalised: every object lists all its properties in `required` and gets `additionalProperties: false`.
//    The result is re-serialised in the typed field order (what a strict tool's prompt shows).
//  - otherwise the schema must be a valid JSON Schema (draft 2020-12 meta-schema: keyword types, local $ref
//    targets, regex syntax; see docs/decisions.md for what is not checked).
#pragma once
#include <string>

#include "core/status.h"
#include "chat/chat_types.h"

namespace dsinfer::chat {

// allow_empty_object: the top-level object may have no properties (tool parameters; not response formats).
// `where` prefixes messages ("tools[0].function.parameters").
Result<ojson> normalize_strict_schema(const ojson& schema, bool allow_empty_object, const std::string& where);

Status validate_json_schema(const ojson& schema, const std::string& where);

}  // namespace dsinfer::chat
