"""The verifier model: the endpoint client, the structured replies, evidence and the critic.

Importing this package is cheap: the `openai` package loads on the first model call.
"""

from daemon.model.client import ModelClient, ModelUnavailable
from daemon.model.schemas import (
    REPLIES,
    CriticVerdict,
    PostmortemRule,
    RuleVerification,
    TriggerMatches,
)

__all__ = [
    "REPLIES",
    "CriticVerdict",
    "ModelClient",
    "ModelUnavailable",
    "PostmortemRule",
    "RuleVerification",
    "TriggerMatches",
]
