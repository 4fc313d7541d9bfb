"""The private helpers every layer shares: files, digests, text, types, arguments."""
