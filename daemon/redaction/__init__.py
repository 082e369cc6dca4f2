"""Secret detection rules: the data files and the rule set built from them."""
