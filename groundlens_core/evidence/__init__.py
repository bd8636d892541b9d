"""Text evidence: sentences, facts and claims of a response checked against its context."""
