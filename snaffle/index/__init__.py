"""The tree-sitter repository index: parsing, the on-disk cache, selectors, imports."""
