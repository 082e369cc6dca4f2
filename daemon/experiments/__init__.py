"""`loopd experiment`: paired runs with and without each support, and their report."""
