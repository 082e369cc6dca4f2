"""snake_case to camelCase (re-created from humps' camelize at issue #61)."""

import re

UNDERSCORE_RE = re.compile(r"(?<=[^\-_\s])[\-_\s]+([^\-_\s])")


def camelize(text):
    if not text or text.isupper() or text.isnumeric():
        return text
    head, rest = text[0].lower(), text[1:]
    return head + UNDERSCORE_RE.sub(lambda m: m.group(1).upper(), rest)
