"""The Caffe prototxt importer: text format, the Q-network of a train net, solver mapping, multipliers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ddq.core.optimizers import FlatOptimizer, OptimizerConfig
from ddq.models import FlatParameters, build_q_network, shipped_models
from ddq.models.caffe import import_net, import_solver, load_net, load_solver
from ddq.models.prototxt import PrototxtError, parse

DATA = Path(__file__).parent / "data"


# ------------------------------------------------------------------ text format
def test_text_format_reads_nesting_repeats_and_scalars():
    message = parse('''
        name: "a" 'b'   # adjacent strings concatenate; comments are skipped
        n: -3 x: 1.5e-2 y: 2f ok: true enum: MAX
        item { v: 1 } item: { v: 2 } item < v: 3 >
        list: [4, 5, 6]; esc: "tab\\there"
    ''')
    assert message.get("name") == "ab"
    assert (message.get("n"), message.get("x"), message.get("y")) == (-3, 0.015, 2.0)
    assert message.get("ok") is True and message.get("enum") == "MAX"
    assert [m.get("v") for m in message.messages("item")] == [1, 2, 3]
    assert message.all("list") == [4, 5, 6]
    assert message.get("esc") == "tab\there"
    assert message.messages("item")[1].line == 4


@pytest.mark.parametrize("text, line, words", [
    ('a {\n  b: 1\n', 3, "close the message opened on line 1"),
    ('a: 1\nb: $\n', 2, "unexpected character"),
    ('a: 1\nb 2\n', 2, "expected ':' or '{'"),
    ('a: 1\n}\n', 2, "expected a field name"),
    ('a: 1\nb: [[1]]\n', 2, "expected a value or a message in a list"),  # would recurse without bound
    ('x {\n' * 65, 65, "messages nested more than 64 deep"),
])
def test_text_format_errors_name_the_line(text, line, words):
    with pytest.raises(PrototxtError, match=rf"net:{line}: .*{words}"):
        parse(text, source="net")


# ------------------------------------------------------------------ nets
def test_v1_train_net_gives_the_original_q_network_and_recognises_the_rest():
    imported = load_net(DATA / "dqn_train_v1.prototxt")
    assert imported.input_blob == "state" and imported.input_shape == (4, 16, 16) and imported.num_actions == 4
    roles = list(imported.roles.values())
    assert roles.count("q-network") == roles.count("target-network") == 13
    assert roles.count("input") == 3 and roles.count("loss") == 7
    network = imported.build()
    reference = build_q_network("deepq", (4, 16, 16), 4)
    assert sum(p.numel() for p in network.parameters()) == 228_132
    assert [p.shape for p in network.parameters()] == [p.shape for p in reference.parameters()]
    assert any(isinstance(m, torch.nn.Dropout) and m.p == 0.5 for m in network)


def test_imported_network_computes_what_the_builder_computes():
    torch.manual_seed(0)
    imported = load_net(DATA / "dqn_train_v1.prototxt").build().eval()
    reference = build_q_network("deepq", (4, 16, 16), 4).eval()
    FlatParameters(imported).data.copy_(FlatParameters(reference).data)
    states = torch.randint(0, 256, (5, 4, 16, 16), dtype=torch.uint8)
    torch.testing.assert_close(imported(states), reference(states))


def test_fillers_and_per_blob_multipliers_follow_the_file():
    torch.manual_seed(1)
    network = load_net(DATA / "dqn_train_v1.prototxt").build()
    conv1, fc4 = network[1], network[11]
    assert abs(conv1.weight.std().item() - 0.01) < 0.001 and abs(fc4.weight.std().item() - 0.005) < 0.0005
    assert torch.all(conv1.bias == 0.5)
    assert (conv1.weight.lr_mult, conv1.bias.lr_mult, conv1.bias.decay_mult) == (1.0, 2.0, 0.0)
    lr_mult = FlatParameters(network).multipliers("lr_mult")
    assert lr_mult is not None and set(lr_mult.unique().tolist()) == {1.0, 2.0}
    assert int((lr_mult == 2.0).sum()) == 32 + 64 + 64 + 512 + 4  # the biases


def test_current_syntax_with_rectangular_kernels_leaky_relu_and_average_pooling():
    torch.manual_seed(2)
    imported = load_net(DATA / "dqn_v2.prototxt")
    network = imported.build()
    assert imported.input_shape == (2, 12, 12) and imported.num_actions == 3
    conv = network[1]
    assert conv.kernel_size == (3, 5) and conv.padding == (1, 2)
    assert conv.weight.abs().max() <= (3.0 / (2 * 3 * 5)) ** 0.5  # xavier's uniform bound
    assert torch.allclose(conv.bias, torch.full((8,), 0.1))
    assert conv.bias.lr_mult == 2.0 and network[-1].bias is None
    out = network(torch.zeros(7, 2, 12, 12, dtype=torch.uint8))
    assert out.shape == (7, 3)
    assert network[5].in_features == 8 * 6 * 6  # Caffe's ceil rounding: (12 - 3) / 2 -> 6


@pytest.mark.parametrize("size", [12, 15, 16, 17])
def test_caffe_pooling_shapes_match_what_torch_computes(size):
    text = (DATA / "dqn_train_v1.prototxt").read_text().replace("height: 16 width: 16", f"height: {size} width: {size}")
    network = import_net(text).build()
    assert network(torch.zeros(2, 4, size, size)).shape == (2, 4)


def test_a_layer_without_a_torch_counterpart_is_named_with_its_line():
    text = (DATA / "dqn_v2.prototxt").read_text().replace(
        'layer { name: "relu2" type: "ReLU"', 'layer { name: "norm" type: "LRN"')
    line = next(i for i, row in enumerate(text.splitlines(), 1) if '"norm"' in row)
    with pytest.raises(PrototxtError, match=rf"net.prototxt:{line}: layer 'norm' has type LRN"):
        import_net(text, "net.prototxt")


def test_a_branch_off_the_q_network_is_refused():
    text = (DATA / "dqn_v2.prototxt").read_text() + \
        'layer { name: "side" type: "InnerProduct" bottom: "pool1" top: "side" inner_product_param { num_output: 2 } }\n'
    with pytest.raises(PrototxtError, match="layer 'side'.*sequential"):
        import_net(text)


def test_shipped_definitions_build_for_their_shapes():
    assert {"deepq16", "deepq32", "deepq64", "deepq128", "nature84", "mlp-cartpole"} <= set(shipped_models())
    deepq16 = build_q_network("deepq16", (4, 16, 16), 4)
    assert sum(p.numel() for p in deepq16.parameters()) == 228_132
    assert sum(p.numel() for p in build_q_network("deepq128", (4, 128, 128), 4).parameters()) == 8_485_668
    assert build_q_network("nature84", (4, 84, 84), 6)(torch.zeros(1, 4, 84, 84)).shape == (1, 6)
    with pytest.raises(ValueError, match="takes states of shape"):
        build_q_network("deepq16", (4, 12, 12), 4)
    with pytest.raises(ValueError, match="outputs 2 action values"):
        build_q_network("mlp-cartpole", (4,), 3)
    with pytest.raises(ValueError, match="unknown model 'deepq17'"):
        build_q_network("deepq17", (4, 16, 16), 4)


# ------------------------------------------------------------------ solvers
def test_v1_solver_maps_onto_optimizer_settings():
    solver = load_solver(DATA / "solver_v1.prototxt")
    assert solver.optim == OptimizerConfig(optimizer="sgd", lr=0.02, momentum=0.95, weight_decay=0.0001,
                                           eps=1e-8, lr_policy="step", lr_gamma=0.5, lr_stepsize=2000)
    assert solver.max_iter == 10_000 and "snapshot" in solver.ignored


def test_current_solver_type_string_and_clipping():
    solver = load_solver(DATA / "solver_rmsprop.prototxt")
    assert (solver.optim.optimizer, solver.optim.lr, solver.optim.rms_decay, solver.optim.eps) == \
        ("rmsprop", 0.00025, 0.95, 0.01)
    assert solver.as_settings()["max_grad_norm"] == 10.0


# What a solver written for Caffe carries besides the update: its nets, test passes, display and snapshots.
CAFFE_BOOKKEEPING = """net: "models/autoencoder/train_test.prototxt"
test_state: { stage: "test-on-train" }
test_iter: 50
test_state: { stage: "test-on-test" }
test_iter: 10
test_interval: 250
test_compute_loss: true
display: 20
max_iter: 3000
snapshot: 1000
snapshot_prefix: "snapshots/autoencoder"
snapshot_format: HDF5
solver_mode: GPU
"""


@pytest.mark.parametrize("update, expected", [
    ('solver_type: SGD\nbase_lr: 0.01\nmomentum: 0.9\nweight_decay: 0.0005\nlr_policy: "step"\ngamma: 0.1\n'
     'stepsize: 1000\n',
     dict(optimizer="sgd", lr=0.01, momentum=0.9, weight_decay=0.0005, lr_policy="step", lr_stepsize=1000)),
    ('type: "Nesterov"\nbase_lr: 0.01\nmomentum: 0.95\nweight_decay: 0.0005\nlr_policy: "fixed"\n',
     dict(optimizer="nesterov", lr=0.01, momentum=0.95, weight_decay=0.0005)),
    ('solver_type: NESTEROV\nbase_lr: 0.02\nmomentum: 0.9\n', dict(optimizer="nesterov", lr=0.02, momentum=0.9)),
    ('type: "AdaGrad"\nbase_lr: 0.01\nweight_decay: 0.0005\n',
     dict(optimizer="adagrad", lr=0.01, weight_decay=0.0005)),
    ('solver_type: RMSPROP\nbase_lr: 0.001\nmomentum: 0.0\nrms_decay: 0.98\n',
     dict(optimizer="rmsprop", lr=0.001, rms_decay=0.98)),
    ('type: "AdaDelta"\nbase_lr: 1.0\nmomentum: 0.95\ndelta: 1e-6\nweight_decay: 0.0005\n',
     dict(optimizer="adadelta", lr=1.0, rho=0.95, eps=1e-6, weight_decay=0.0005)),
    ('solver_type: ADADELTA\nbase_lr: 0.5\nmomentum: 0.9\n', dict(optimizer="adadelta", lr=0.5, rho=0.9)),
    ('type: "Adam"\nbase_lr: 0.001\nmomentum: 0.9\nmomentum2: 0.99\n',
     dict(optimizer="adam", lr=0.001, beta1=0.9, beta2=0.99)),
], ids=["SGD", "Nesterov", "NESTEROV", "AdaGrad", "RMSPROP", "AdaDelta", "ADADELTA", "Adam"])
def test_a_solver_written_for_caffe_of_each_of_its_six_types_imports(update, expected):
    """Caffe's momentum is Adam's beta1 and AdaDelta's rho; its delta (default 1e-8) the eps of all."""
    solver = import_solver(CAFFE_BOOKKEEPING + update)
    assert solver.optim == OptimizerConfig(**{"eps": 1e-8, **expected})
    assert solver.max_iter == 3000 and {"test_state", "test_compute_loss", "snapshot_format"} <= set(solver.ignored)


@pytest.mark.parametrize("text, words", [
    ('base_lr: 0.1\nlr_policy: "inv"\n', r"solver:2: lr_policy 'inv'"),
    ('type: "LBFGS"\n', r"solver:1: solver type LBFGS has no ddq counterpart; ddq has SGD, NESTEROV, ADAGRAD, "
                         r"RMSPROP, ADADELTA, ADAM"),
    ('base_lr: 0.1\nwarp_speed: 9\n', r"solver:2: solver setting 'warp_speed'"),
])
def test_solver_settings_ddq_lacks_are_errors(text, words):
    with pytest.raises(PrototxtError, match=words):
        import_solver(text)


# ------------------------------------------------------------------ multipliers in the optimizer
@pytest.mark.parametrize("name, options", [
    ("sgd", dict(momentum=0.9, weight_decay=0.01)),
    ("rmsprop", dict(weight_decay=0.01)),
    ("adagrad", dict()),
    ("adam", dict(weight_decay=0.01)),
    ("nesterov", dict(momentum=0.9, weight_decay=0.01)),
    ("adadelta", dict(weight_decay=0.01)),
])
def test_per_blob_multipliers_match_torch_parameter_groups(name, options):
    torch.manual_seed(3)
    weight, bias = torch.randn(50), torch.randn(10)
    lr, mults = 0.01, ((1.0, 1.0), (2.0, 0.0))  # (lr_mult, decay_mult) of weight and bias, as Caffe nets use
    config = OptimizerConfig(optimizer=name, lr=lr, **options)
    decay = options.get("weight_decay", 0.0)
    reference_params = [weight.clone().requires_grad_(), bias.clone().requires_grad_()]
    torch_class = {"sgd": torch.optim.SGD, "rmsprop": torch.optim.RMSprop, "adagrad": torch.optim.Adagrad,
                   "adam": torch.optim.Adam, "nesterov": torch.optim.SGD, "adadelta": torch.optim.Adadelta}[name]
    extra: dict = {"momentum": options["momentum"]} if "momentum" in options else {}
    if name == "rmsprop":
        extra["alpha"] = config.rms_decay
    if name == "nesterov":
        extra["nesterov"] = True
    if name == "adadelta":
        extra["rho"] = config.rho
    reference = torch_class([{"params": [p], "lr": lr * lm, "weight_decay": decay * dm}
                             for p, (lm, dm) in zip(reference_params, mults)], **extra)
    flat = torch.cat([weight, bias])
    lr_mult = torch.cat([torch.full((50,), mults[0][0]), torch.full((10,), mults[1][0])])
    decay_mult = torch.cat([torch.full((50,), mults[0][1]), torch.full((10,), mults[1][1])])
    ours = FlatOptimizer(config, 60, lr_mult=lr_mult, decay_mult=decay_mult)
    for _ in range(5):
        grad = torch.randn(60)
        reference_params[0].grad, reference_params[1].grad = grad[:50].clone(), grad[50:].clone()
        reference.step()
        ours.step(flat, grad)
    torch.testing.assert_close(flat, torch.cat([p.detach() for p in reference_params]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("text, where", [
    ("type: \"RMSProp\"\nbase_lr: fast\n", "solver:2: solver setting base_lr: 'fast' is not a number"),
    ("stepsize: 1.5\n", "solver:1: solver setting stepsize: 1.5 is not a whole number"),
    ("lr_policy: \"step\"\nstepsize: 0\n", "solver: lr_stepsize must be positive, got 0"),
])
def test_solver_numbers_that_are_not_name_the_file_and_line(text, where):
    with pytest.raises(PrototxtError) as refused:
        import_solver(text)
    assert str(refused.value).startswith(where)


def test_a_definition_over_a_mebibyte_is_not_read(tmp_path):
    """A net definition holds no weights (ResNet-152's is about 300 kB); tokenizing far more costs memory."""
    with pytest.raises(PrototxtError, match=r"net: 1,048,577 characters; ddq reads definitions of up to 1,048,576"):
        parse("#" * (2**20 + 1), source="net")
    big = tmp_path / "big.prototxt"
    big.write_bytes(b"#" * (2**20 + 1))
    with pytest.raises(PrototxtError, match=rf"{big}: 1,048,577 bytes"):
        load_net(big)
