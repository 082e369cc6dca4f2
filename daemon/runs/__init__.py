"""The run lifecycle: worktree, prompt, attempt, checks, judge, learn, finish."""
