"""The 50 JSON schemas of the structured-outputs test (tests/python/structured_outputs_test.py): nested
objects, arrays with minItems/maxItems, enums, patterns, numbers with ranges, optional and required fields,
anyOf/oneOf, $ref, const, nullable types, top-level non-objects. Deterministic: built from templates."""


def obj(props, required=None, **extra):
    s = {"type": "object", "properties": props}
    if required is not None:
        s["required"] = required
    s.update(extra)
    return s


def schemas():
    out = []
    # 1-5: flat objects, all required, varied scalar types and ranges
    out.append(obj({"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 120}}, ["name", "age"]))
    out.append(obj({"title": {"type": "string", "maxLength": 20}, "pages": {"type": "integer", "minimum": 1, "maximum": 2000}}, ["title", "pages"]))
    out.append(obj({"x": {"type": "number", "minimum": -1, "maximum": 1}, "y": {"type": "number", "minimum": -1, "maximum": 1}}, ["x", "y"]))
    out.append(obj({"ok": {"type": "boolean"}, "code": {"type": "integer", "minimum": 100, "maximum": 599}}, ["ok", "code"]))
    out.append(obj({"id": {"type": "integer", "minimum": 1}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3}}, ["id", "tags"]))
    # 6-10: enums
    out.append(obj({"color": {"enum": ["red", "green", "blue"]}}, ["color"]))
    out.append(obj({"level": {"type": "string", "enum": ["low", "medium", "high"]}, "score": {"type": "integer", "minimum": 0, "maximum": 10}}, ["level", "score"]))
    out.append(obj({"status": {"enum": ["active", "inactive", None, 3]}}, ["status"]))
    out.append({"type": "string", "enum": ["yes", "no", "maybe"]})
    out.append(obj({"days": {"type": "array", "items": {"enum": ["mon", "tue", "wed", "thu", "fri"]}, "minItems": 1, "maxItems": 3}}, ["days"]))
    # 11-16: arrays with bounds, top-level arrays, nested arrays
    out.append({"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 2, "maxItems": 4})
    out.append({"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 1, "maxItems": 2})
    out.append(obj({"matrix": {"type": "array", "items": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "minItems": 2, "maxItems": 2}, "minItems": 2, "maxItems": 2}}, ["matrix"]))
    out.append(obj({"points": {"type": "array", "minItems": 1, "maxItems": 2, "items": obj({"x": {"type": "integer"}, "y": {"type": "integer"}}, ["x", "y"])}}, ["points"]))
    out.append({"type": "array", "items": {"type": "boolean"}, "minItems": 3, "maxItems": 3})
    out.append(obj({"empty_ok": {"type": "array", "items": {"type": "number"}, "maxItems": 2}}, ["empty_ok"]))
    # 17-22: patterns and string lengths
    out.append(obj({"code": {"type": "string", "pattern": "^[A-Z]{3}[0-9]{2}$"}}, ["code"]))
    out.append(obj({"zip": {"type": "string", "pattern": "^[0-9]{5}$"}, "state": {"type": "string", "pattern": "^[A-Z]{2}$"}}, ["zip", "state"]))
    out.append(obj({"hex": {"type": "string", "pattern": "^#[0-9a-f]{6}$"}}, ["hex"]))
    out.append(obj({"word": {"type": "string", "minLength": 2, "maxLength": 6}}, ["word"]))
    out.append({"type": "string", "pattern": "^[a-z]+-[0-9]{1,3}$"})
    out.append(obj({"version": {"type": "string", "pattern": "^v[0-9]\\.[0-9]\\.[0-9]$"}, "stable": {"type": "boolean"}}, ["version", "stable"]))
    # 23-28: numbers with ranges (inclusive / exclusive), top-level scalars
    out.append({"type": "integer", "minimum": 10, "maximum": 20})
    out.append({"type": "number", "minimum": 0, "maximum": 100})
    out.append(obj({"p": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}}, ["p"]))
    out.append(obj({"temp": {"type": "integer", "minimum": -40, "maximum": -1}}, ["temp"]))
    out.append({"type": "boolean"})
    out.append(obj({"n": {"type": "integer", "exclusiveMinimum": 5, "maximum": 9}, "m": {"type": "integer", "minimum": 0, "exclusiveMaximum": 3}}, ["n", "m"]))
    # 29-34: optional and required fields
    out.append(obj({"a": {"type": "string", "maxLength": 10}, "b": {"type": "integer"}}, ["a"]))
    out.append(obj({"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "string", "maxLength": 5}}, []))
    out.append(obj({"first": {"type": "string", "maxLength": 12}, "middle": {"type": "string", "maxLength": 12}, "last": {"type": "string", "maxLength": 12}}, ["first", "last"]))
    out.append(obj({"k": {"type": "integer"}}, ["k"], additionalProperties=False))
    out.append(obj({"q": {"type": "string", "maxLength": 16}, "limit": {"type": "integer", "minimum": 1, "maximum": 50}, "offset": {"type": "integer", "minimum": 0}}, ["q"]))
    out.append(obj({"note": {"type": ["string", "null"], "maxLength": 10}, "count": {"type": ["integer", "null"]}}, ["note", "count"]))
    # 35-40: nested objects
    out.append(obj({"person": obj({"name": {"type": "string", "maxLength": 16}, "age": {"type": "integer", "minimum": 0, "maximum": 99}}, ["name", "age"])}, ["person"]))
    out.append(obj({"address": obj({"street": {"type": "string", "maxLength": 20}, "city": {"type": "string", "maxLength": 16}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, ["street", "city", "zip"])}, ["address"]))
    out.append(obj({"a": obj({"b": obj({"c": {"type": "integer", "minimum": 0, "maximum": 9}}, ["c"])}, ["b"])}, ["a"]))
    out.append(obj({"meta": obj({"created": {"type": "integer", "minimum": 0}, "by": {"enum": ["alice", "bob"]}}, ["created", "by"]), "data": {"type": "array", "items": {"type": "integer"}, "maxItems": 3}}, ["meta", "data"]))
    out.append(obj({"config": obj({"debug": {"type": "boolean"}, "level": {"type": "integer", "minimum": 0, "maximum": 5}}, ["debug"])}, ["config"]))
    out.append(obj({"user": obj({"id": {"type": "integer", "minimum": 1, "maximum": 9999}, "roles": {"type": "array", "items": {"enum": ["admin", "user", "guest"]}, "minItems": 1, "maxItems": 2}}, ["id", "roles"]), "active": {"type": "boolean"}}, ["user", "active"]))
    # 41-46: anyOf / oneOf / allOf / const
    out.append(obj({"value": {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "integer"}]}}, ["value"]))
    out.append({"anyOf": [obj({"kind": {"const": "circle"}, "r": {"type": "number", "minimum": 0, "maximum": 100}}, ["kind", "r"]),
                          obj({"kind": {"const": "square"}, "side": {"type": "number", "minimum": 0, "maximum": 100}}, ["kind", "side"])]})
    out.append(obj({"id": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]}}, ["id"]))
    out.append({"oneOf": [obj({"type": {"const": "a"}, "x": {"type": "integer"}}, ["type", "x"]), obj({"type": {"const": "b"}, "y": {"type": "boolean"}}, ["type", "y"])]})
    out.append(obj({"version": {"const": 2}, "name": {"type": "string", "maxLength": 10}}, ["version", "name"]))
    out.append({"allOf": [obj({"a": {"type": "integer", "minimum": 1, "maximum": 3}}, ["a"])]})
    # 47-50: $defs / $ref, recursion-free reuse, mixed
    out.append({"$defs": {"pt": obj({"x": {"type": "integer"}, "y": {"type": "integer"}}, ["x", "y"])},
                "type": "object", "properties": {"from": {"$ref": "#/$defs/pt"}, "to": {"$ref": "#/$defs/pt"}}, "required": ["from", "to"]})
    out.append({"$defs": {"color": {"enum": ["red", "green"]}}, "type": "array", "items": {"$ref": "#/$defs/color"}, "minItems": 1, "maxItems": 3})
    out.append(obj({"items": {"type": "array", "maxItems": 2, "items": obj({"sku": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"}, "qty": {"type": "integer", "minimum": 1, "maximum": 9}, "price": {"type": "number", "minimum": 0}}, ["sku", "qty"])}, "total": {"type": "number", "minimum": 0}}, ["items", "total"]))
    out.append(obj({"event": {"enum": ["start", "stop"]}, "at": {"type": "integer", "minimum": 0, "maximum": 86399}, "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,5}$"}, "maxItems": 2}, "extra": {"anyOf": [{"type": "boolean"}, {"type": "null"}]}}, ["event", "at"]))
    assert len(out) == 50, len(out)
    return out
