kinds = 3
tcols = 7
