"""schemathesis hooks (SCHEMATHESIS_HOOKS=tests.server.schema_checks): a check of our own on
top of its built-in ones. A 400 must name what is wrong: OpenAI's shape by its `param` (or,
for a body that is not JSON at all, the code `invalid_json`), Anthropic's, which has no such
field, in its message: quoted, or leading it as Anthropic's own API does (`messages: ...`)."""
import re

import schemathesis

NOT_JSON = "invalid_json"


@schemathesis.check
def a_400_names_the_field(ctx, response, case):
    if response.status_code != 400:
        return None
    body = response.json()
    if body.get("type") == "error":  # Anthropic
        message = body["error"]["message"]
        named = re.search(r"'[^']+'", message) or re.match(r"[\w.\[\]]+: ", message) or "JSON" in message
        assert named, f"400 without a field: {message!r}"
    else:
        error = body["error"]
        assert error["param"] or error["code"] == NOT_JSON, f"400 without a param: {error!r}"
    return True
