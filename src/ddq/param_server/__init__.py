"""The parameter server's parts; for now the optimizers it applies to flat vectors."""
