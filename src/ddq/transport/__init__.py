"""How ddq's processes talk: the wire format of weights and gradients (and, with Redis, where they go)."""
