"""camelCase to snake_case (re-created from djangorestframework-camel-case's util at issue #102)."""

import re

UNDERSCORE_RE = re.compile(
    r"([a-z0-9]|[A-Z]?(?=[A-Z0-9](?=[a-z0-9]|$)))"
    r"([A-Z]|(?<=[a-z])[0-9](?=[0-9A-Z]|$)|(?<=[A-Z])[0-9](?=[0-9]|$))"
)


def camel_to_underscore(name):
    if name.isupper():
        return name.lower()
    return UNDERSCORE_RE.sub(r"\1_\2", name).lower()
