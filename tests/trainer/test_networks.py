"""trainer.networks: layer sizes, MLPs and observation encoders (NoisyLinear is in test_dqn_family.py)."""

import copy

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

from trainer.envs import is_image_space
from trainer.networks import ObservationEncoder, image_channels_first, mlp, parse_hidden_layers


@pytest.mark.parametrize("text, sizes", [("256,256", (256, 256)), (" 64 , 32 ", (64, 32)), ("7", (7,)),
                                         ("", ()), ("8,,4", (8, 4))])
def test_parse_hidden_layers_reads_comma_separated_sizes(text, sizes):
    assert parse_hidden_layers(text) == sizes


@pytest.mark.parametrize("text, message", [("64,x", "whole numbers"), ("1.5", "whole numbers"), ("0", "1 to 65536"),
                                           ("65537", "1 to 65536"), (",".join(["4"] * 17), "0 to 16 layers")])
def test_parse_hidden_layers_refuses_what_is_not_a_list_of_sizes(text, message):
    with pytest.raises(ValueError, match=message):
        parse_hidden_layers(text)


def test_mlp_has_the_hidden_layers_then_a_linear_output():
    network = mlp(4, (8, 6), 2)
    shapes = [(layer.in_features, layer.out_features) for layer in network if isinstance(layer, nn.Linear)]
    assert shapes == [(4, 8), (8, 6), (6, 2)]
    assert [type(layer) for layer in network] == [nn.Linear, nn.ReLU, nn.Linear, nn.ReLU, nn.Linear]
    assert network(torch.zeros(5, 4)).shape == (5, 2)


def test_mlp_without_an_output_size_ends_with_the_activation():
    network = mlp(3, (16,), None, activation=nn.Tanh)
    assert [type(layer) for layer in network] == [nn.Linear, nn.Tanh]
    output = network(torch.full((2, 3), 100.0))
    assert output.shape == (2, 16) and output.abs().max() <= 1.0
    assert [type(layer) for layer in mlp(3, (), 2)] == [nn.Linear]  # no hidden layer: one linear map


def test_mlp_builds_each_layer_with_the_given_factory():
    built = []

    def linear(inputs, outputs):
        built.append((inputs, outputs))
        return nn.Linear(inputs, outputs, bias=False)

    network = mlp(2, (3,), 1, linear=linear)
    assert built == [(2, 3), (3, 1)]
    assert all(layer.bias is None for layer in network if isinstance(layer, nn.Linear))


def test_uint8_boxes_of_two_or_three_dimensions_are_images():
    assert is_image_space(spaces.Box(0, 255, (84, 84, 4), dtype=np.uint8))
    assert is_image_space(spaces.Box(0, 255, (84, 84), dtype=np.uint8))
    assert not is_image_space(spaces.Box(0, 1, (84, 84, 4), dtype=np.float32))
    assert not is_image_space(spaces.Box(0, 255, (8,), dtype=np.uint8))
    assert image_channels_first((4, 84, 84)) and image_channels_first((84, 84))
    assert not image_channels_first((210, 160, 3))


def test_a_discrete_observation_is_one_hot_from_the_space_start():
    encoder = ObservationEncoder(spaces.Discrete(3, start=1))
    assert encoder.output_size == 3
    assert encoder(torch.tensor([1, 3])).tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]


def test_a_multi_discrete_observation_is_one_one_hot_per_dimension():
    encoder = ObservationEncoder(spaces.MultiDiscrete([2, 3]))
    assert encoder.output_size == 5
    assert encoder(torch.tensor([[1, 0], [0, 2]])).tolist() == [[0, 1, 1, 0, 0], [1, 0, 0, 0, 1]]


def test_box_and_binary_observations_are_flattened_to_floats():
    box = ObservationEncoder(spaces.Box(-1, 1, (2, 3)))
    assert box.output_size == 6
    values = torch.arange(12, dtype=torch.float64).reshape(2, 2, 3)
    encoded = box(values)
    assert encoded.dtype == torch.float32 and encoded.tolist() == values.reshape(2, 6).tolist()
    binary = ObservationEncoder(spaces.MultiBinary(4))
    assert binary.output_size == 4 and binary(torch.tensor([[1, 0, 0, 1]], dtype=torch.int8)).tolist() == [
        [1.0, 0.0, 0.0, 1.0]]


def test_image_observations_go_through_the_nature_cnn():
    encoder = ObservationEncoder(spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8))
    assert encoder.kind == "Image" and encoder.output_size == 512
    frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    assert encoder(frames).shape == (2, 512)
    with pytest.raises(ValueError, match="at least 36x36"):
        ObservationEncoder(spaces.Box(0, 255, (4, 20, 20), dtype=np.uint8))


def contiguous_nature_cnn(cnn, images: torch.Tensor) -> torch.Tensor:
    """The Nature CNN's layers run on (N, C, H, W) floats in torch's default layout: the reference."""
    x = images.to(next(cnn.parameters()).dtype) / 255.0
    for layer in (*cnn.convolutions, *cnn.linear):
        x = layer(x)
    return x


@pytest.mark.parametrize("shape, permutation", [((4, 84, 84), None), ((84, 84, 3), (0, 3, 1, 2)), ((84, 84), None)])
def test_the_channels_last_cnn_on_a_cpu_gives_the_values_of_the_contiguous_one(shape, permutation):
    torch.manual_seed(0)
    encoder = ObservationEncoder(spaces.Box(0, 255, shape, dtype=np.uint8))
    for batch in (1, 32):  # acting and learning
        frames = torch.randint(0, 256, (batch, *shape), dtype=torch.uint8)
        reference_input = frames.permute(*permutation) if permutation else frames
        if len(shape) == 2:
            reference_input = frames.unsqueeze(1)
        expected = contiguous_nature_cnn(encoder.cnn, reference_input.contiguous())
        features = encoder(frames)
        torch.testing.assert_close(features, expected, rtol=1e-5, atol=1e-5)
        assert features.is_contiguous()
        # and so do the gradients of the weights, to float32's accuracy for sums of ~10^4 terms: measured against
        # float64 (oneDNN's channels-last kernels for 3-channel input are ~6e-5 off on AVX512 CPUs, the default
        # layout ~1e-6; a wrong layout or permutation would be off by ~1)
        encoder.zero_grad()
        features.square().sum().backward()
        exact_cnn = copy.deepcopy(encoder.cnn).double()
        contiguous_nature_cnn(exact_cnn, reference_input.contiguous().double()).square().sum().backward()
        for mine, exact in zip(encoder.cnn.parameters(), exact_cnn.parameters()):
            assert ((mine.grad.double() - exact.grad).norm() / exact.grad.norm()).item() < 2e-4
