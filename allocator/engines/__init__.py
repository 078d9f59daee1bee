"""The serving engines at the edge: what vLLM and SGLang take (exported settings) and
what they name things. Nothing inside the model or the solvers imports from here."""
