"""loopd's git: safe git, its own git per run, the user's repository, the run's tree, integrity."""
