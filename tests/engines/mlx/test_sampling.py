"""Samplers: like unseeded requests share one (a batch samples them in one call)."""

from __future__ import annotations

import mlx.core as mx

from engines.mlx.sampling import KeyedSampler, make_request_sampler


def test_unseeded_requests_with_the_same_settings_share_one_sampler():
    first = make_request_sampler(0.7, 0.9, None, None, None)
    assert make_request_sampler(0.7, 0.9, None, None, None) is first
    assert make_request_sampler(0.8, 0.9, None, None, None) is not first
    greedy = make_request_sampler(None, None, None, None, None)
    assert make_request_sampler(0.0, None, None, None, 5) is greedy  # a seed draws nothing


def test_a_seeded_request_has_a_sampler_of_its_own_that_samples_each_row():
    one, two = (make_request_sampler(1.0, None, None, None, 3) for _ in range(2))
    assert isinstance(one, KeyedSampler) and one is not two
    logprobs = mx.log(mx.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]) + 1e-9)
    assert one(logprobs).tolist() == [1, 0]  # a batched call draws per row
