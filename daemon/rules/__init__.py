"""The promotion loop: rule files, the rule verifier, the trigger evaluator, promotion."""
