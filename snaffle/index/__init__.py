"""The tree-sitter repository index: parse, skeleton, cache, selectors, imports; `repo.RepoIndex` joins them."""
