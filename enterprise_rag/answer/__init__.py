"""The corrective, self-checking answer workflow (its events, state, sources and outcome) and its runner."""
