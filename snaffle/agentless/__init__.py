"""The agentless arm: issue text, documents, localize, SBFL, repair, validate, and the pipeline that runs them."""
