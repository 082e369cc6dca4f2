"""Landing a succeeded run: what may not land, the merge, push, pull request; run branches."""
