"""The CPU inference engine's model: a byte-level causal transformer the project trains on bundled text."""
