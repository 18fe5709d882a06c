"""The structure-aware primitives the model calls, and the control arm's bash and str_replace_editor."""
