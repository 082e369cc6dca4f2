"""The four structured model replies, with their strict JSON schemas."""

from __future__ import annotations

import copy
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

# Bounds stated in the schema, not checked on the reply: a server that generates by the schema
# (a grammar) stops a model looping inside a string or a list, the prompt states them, and a
# longer reply from a server that ignores them is still taken. Kept small enough for
# llama.cpp's grammars, which refuse a repetition of much more than 1000.
SENTENCE: dict[str, Any] = {"maxLength": 400}
PARAGRAPH: dict[str, Any] = {"maxLength": 1000}


def _strings(most: int, length: int = 400) -> dict[str, Any]:
    """The schema bounds of a list of strings: at most `most` items of `length` characters."""
    return {"maxItems": most, "items": {"type": "string", "maxLength": length}}


class Reply(BaseModel):
    """A structured model reply: a NAME and a schema that strict json_schema servers accept."""

    model_config = ConfigDict(extra="forbid")

    NAME: ClassVar[str]

    @classmethod
    def strict_schema(cls) -> dict[str, Any]:
        """The JSON schema, inlined, every property required, no additional properties."""
        return strict_schema(cls.model_json_schema())


class CriticVerdict(Reply):
    """`critic_verdict`: the critic's judgement of one attempt."""

    NAME: ClassVar[str] = "critic_verdict"

    score: int = Field(
        ge=0,
        le=10,
        description="0-10; 10: every claim backed by evidence",
        json_schema_extra={"enum": list(range(11))},  # grammars ignore minimum and maximum
    )
    verdict: str = Field(description="one sentence", json_schema_extra=SENTENCE)
    unsupported_claims: list[str] = Field(
        description="claims of the summary that the evidence does not back",
        json_schema_extra=_strings(10),
    )
    feedback: str = Field(description="what the next attempt must fix", json_schema_extra=PARAGRAPH)
    # Absent from a reply (a server that ignores the schema): no attribution, not an error.
    rules_followed: list[str] = Field(
        [],
        description="ids of the listed rules that the attempt followed",
        json_schema_extra=_strings(40, 80),
    )
    rules_irrelevant: list[str] = Field(
        [],
        description="ids of the listed rules that had nothing to do with this attempt",
        json_schema_extra=_strings(40, 80),
    )


class EvidenceQuote(BaseModel):
    """A place in the attempt's evidence that a rule rests on."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        description="a file of the evidence, e.g. transcript.jsonl or diff.patch",
        json_schema_extra={"maxLength": 200},
    )
    line: int = Field(ge=0, description="the line in that file; 0 when not known")
    quote: str = Field(description="verbatim text found at that place", json_schema_extra=SENTENCE)


class PostmortemRule(Reply):
    """`postmortem_rule`: one candidate rule learned from a failed (or skill: a passing) attempt."""

    NAME: ClassVar[str] = "postmortem_rule"

    kind: Literal["failure", "decision", "knowledge", "skill"]
    rule: str = Field(description="one sentence: what to do", json_schema_extra=SENTENCE)
    why: str = Field(
        description="one sentence: what happened, with facts from the evidence",
        json_schema_extra=SENTENCE,
    )
    how_to_apply: str = Field(description="one sentence", json_schema_extra=SENTENCE)
    trigger_intent: str = Field(
        description="one sentence: the tasks this rule is for", json_schema_extra=SENTENCE
    )
    trigger_patterns: list[str] = Field(
        description="regular expressions matching such tasks", json_schema_extra=_strings(5, 200)
    )
    severity: Literal["remind", "refuse", "escalate"]
    evidence: list[EvidenceQuote] = Field(json_schema_extra={"maxItems": 5})


class RuleVerification(Reply):
    """`rule_verification`: the model's check of a candidate rule against evidence and rules."""

    NAME: ClassVar[str] = "rule_verification"

    grounded: bool
    unsupported: list[str] = Field(
        description="claims of the rule not found in the evidence", json_schema_extra=_strings(10)
    )
    contradicts: list[str] = Field(
        description="ids of the related rules it contradicts", json_schema_extra=_strings(10, 80)
    )
    reason: str = Field(json_schema_extra=PARAGRAPH)


class TriggerMatches(Reply):
    """`trigger_matches`: the rule ids whose trigger intent fits the task."""

    NAME: ClassVar[str] = "trigger_matches"

    matches: list[str] = Field(json_schema_extra=_strings(40, 80))


REPLIES: dict[str, type[Reply]] = {
    model.NAME: model for model in (CriticVerdict, PostmortemRule, RuleVerification, TriggerMatches)
}

# Keywords that strict json_schema modes refuse or that only add noise to the prompt.
_DROPPED_KEYS = ("title", "default", "examples")


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Make a pydantic schema strict-compatible: $refs inlined, all required, closed objects."""
    definitions = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = definitions[node["$ref"].rsplit("/", 1)[-1]]
            merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
            return walk(merged)
        out = {k: walk(v) for k, v in node.items() if k not in _DROPPED_KEYS and k != "$defs"}
        if isinstance(node.get("properties"), dict):  # property names are data, never dropped
            out["properties"] = {k: walk(v) for k, v in node["properties"].items()}
        if out.get("type") == "object" or "properties" in out:
            out["type"] = "object"
            out["required"] = list(out.get("properties", {}))
            out["additionalProperties"] = False
        return out

    return walk(schema)
