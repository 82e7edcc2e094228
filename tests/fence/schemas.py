"""The fence's schema suite: every keyword JsonSchemaFence enforces, and tool schemas shaped
like real agents' (nested objects, arrays of objects, enums, anyOf)."""
from zllm_core.dialects.conversation import FunctionTool

KEYWORDS = {
    "type_list": {"type": ["integer", "null", "boolean"]},
    "object": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
               "required": ["b"], "additionalProperties": False},
    "enum_const": {"type": "object", "properties": {"mode": {"enum": ["read", "write", 3, None]},
                                                     "v": {"const": {"k": [1, "x"]}}},
                   "required": ["mode", "v"]},
    "any_of": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "array", "items": {"type": "integer"}}]},
    "one_of": {"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"]},
                         {"type": "integer", "minimum": 10}]},
    "items": {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 4},
    "lengths": {"type": "string", "minLength": 2, "maxLength": 6},
    "bounds": {"type": "object", "properties": {
        "i": {"type": "integer", "minimum": -25, "maximum": 130},
        "e": {"type": "integer", "exclusiveMinimum": 5, "exclusiveMaximum": 9},
        "n": {"type": "number", "minimum": 0.5, "maximum": 3}}, "required": ["i", "e", "n"]},
    "number": {"type": "number"},
    "pattern": {"type": "string", "pattern": "^[a-z]{2,5}-\\d+(\\.py)?$"},
    "pattern_search": {"type": "string", "pattern": "ab|cd"},
    "property_names": {"type": "object", "properties": {"x1": {"type": "null"}}, "propertyNames": {"pattern": "^x"},
                       "required": ["x1"]},
    "annotations": {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "t",
                    "description": "d", "type": "string", "format": "uri", "default": "x"},
    "refs": {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
             "type": "array", "items": {"$ref": "#/$defs/pt"}, "maxItems": 2},
    "free_object": {"type": "object"},
    "escapes": {"type": "string", "maxLength": 4},
}

AGENT_TOOLS = {
    "edit_file": {"type": "object", "properties": {
        "path": {"type": "string", "description": "File to edit."},
        "edits": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
            "type": "object", "properties": {"old_string": {"type": "string"}, "new_string": {"type": "string"},
                                             "replace_all": {"type": "boolean"}},
            "required": ["old_string", "new_string"], "additionalProperties": False}}},
        "required": ["path", "edits"], "additionalProperties": False},
    "todo_write": {"type": "object", "properties": {"todos": {"type": "array", "items": {
        "type": "object", "properties": {
            "content": {"type": "string", "minLength": 1},
            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
            "priority": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 5}, {"type": "null"}]}},
        "required": ["content", "status"]}}}, "required": ["todos"]},
    "run": {"type": "object", "properties": {
        "command": {"type": "string"}, "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 600000},
        "env": {"type": "object", "properties": {"CI": {"type": "string"}}}},
        "required": ["command"]},
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "unit": {"enum": ["celsius", "fahrenheit"]}},
                    "required": ["city"]},
    "get_time": {"type": "object", "properties": {"tz": {"type": "string", "pattern": "^[A-Z][a-z]+/[A-Z][a-z]+$"}},
                 "required": ["tz"]},
}
SUITE = {**KEYWORDS, **AGENT_TOOLS}


def as_parameter(schema: dict) -> FunctionTool:
    """A tool with one required parameter under `schema` (its $defs at the top, where its refs point)."""
    params = {"type": "object", "properties": {"value": {k: v for k, v in schema.items() if k != "$defs"}},
              "required": ["value"], **({"$defs": schema["$defs"]} if "$defs" in schema else {})}
    return FunctionTool("f", None, params)
