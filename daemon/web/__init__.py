"""`loopd web`: the console, pages and actions over the commands' own readers and actions."""
