"""Network builders, the Caffe prototxt importer and the flat parameter view every mode shares."""

from ddq.models.flat import FlatParameters
from ddq.models.networks import BUILDERS, build_q_network, model_definition, shipped_models

__all__ = ["BUILDERS", "FlatParameters", "build_q_network", "model_definition", "shipped_models"]
