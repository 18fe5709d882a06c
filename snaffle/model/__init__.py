"""The model boundary: the OpenAI client and its retries, the text tool-call protocol, wire messages, token
estimates, the embedded local model."""
