"""Network builders and the flat parameter view every mode shares."""

from ddq.models.flat import FlatParameters
from ddq.models.networks import MODEL_NAMES, build_q_network

__all__ = ["FlatParameters", "MODEL_NAMES", "build_q_network"]
