"""Tabular Q-learning: the update against its closed form, the grid at its bounds, checkpoints."""

import numpy as np
import pytest

import trainer
from trainer.algorithms.qlearning import Grid
from trainer.events import ListSink


def frozen_lake(**hyperparameters):
    return trainer.make("qlearning", "FrozenLake-v1", seed=0, **hyperparameters)


def test_the_update_on_a_hand_made_mdp_equals_the_closed_form():
    # s0 --a1, r=1--> s1, where Q(s1) = [2, 3]: target = 1 + gamma * 3 (not terminal)
    agent = frozen_lake(learning_rate=0.25, gamma=0.9)
    agent.table[1] = [2.0, 3.0, 0.0, 0.0]
    for n in range(1, 11):
        agent.update(np.array([0]), np.array([1]), np.array([1.0]), np.array([1]), np.array([0.0]))
        # Q_n = (1 - (1 - lr)^n) * target, starting from Q_0 = 0
        assert agent.table[0, 1] == pytest.approx((1 - 0.75**n) * (1 + 0.9 * 3))
    assert agent.table[0, [0, 2, 3]].tolist() == [0, 0, 0]


def test_a_terminal_transition_does_not_bootstrap_but_a_truncated_one_does():
    agent = frozen_lake(learning_rate=1.0, gamma=0.5)
    agent.table[5] = [4.0, 0.0, 0.0, 0.0]
    agent.update(np.array([0, 1]), np.array([2, 2]), np.array([1.0, 1.0]), np.array([5, 5]), np.array([1.0, 0.0]))
    assert agent.table[0, 2] == 1.0  # terminated: r
    assert agent.table[1, 2] == 1.0 + 0.5 * 4.0  # truncated or ongoing: r + gamma max Q(s')


def test_grid_cells_at_and_beyond_the_bounds():
    grid = Grid(np.array([-1.0, 0.0]), np.array([1.0, 10.0]), np.array([4, 5]))
    observations = np.array([[-1.0, 0.0], [1.0, 10.0], [-0.5, 2.0], [-0.5 - 1e-9, 2.0 - 1e-9], [-5.0, 99.0],
                             [0.0, 5.0]])
    assert grid.cells(observations).tolist() == [[0, 0], [3, 4], [1, 1], [0, 0], [0, 4], [2, 2]]
    assert grid.index(observations[:2]).tolist() == [0, 4 * 5 - 1]


def test_mountain_car_is_discretised_on_a_grid_from_the_space_bounds():
    agent = trainer.make("qlearning", "MountainCar-v0", seed=0, grid_size="20")
    assert agent.q_table().shape == (20, 20, 3)
    low, high = agent.observation_space.low, agent.observation_space.high
    assert agent.states(np.stack([low, high])).tolist() == [0, 399]


def test_unbounded_dimensions_need_bounds_and_accept_them_per_dimension():
    with pytest.raises(trainer.ConfigError) as error:
        trainer.validate("qlearning", "CartPole-v1", {})
    assert "unbounded" in error.value.errors["low"] and "unbounded" in error.value.errors["high"]
    hyperparameters = dict(grid_size="1,1,6,12", low="-2.4,-3,-0.21,-3.5", high="2.4,3,0.21,3.5")
    assert trainer.validate("qlearning", "CartPole-v1", hyperparameters)["grid_size"] == "1,1,6,12"
    agent = trainer.make("qlearning", "CartPole-v1", **hyperparameters)
    assert agent.q_table().shape == (1, 1, 6, 12, 2)
    with pytest.raises(trainer.ConfigError) as error:
        trainer.validate("qlearning", "CartPole-v1", dict(hyperparameters, low="-1,-1"))
    assert "4 values" in error.value.errors["low"]


def test_it_refuses_continuous_actions():
    with pytest.raises(trainer.ConfigError) as error:
        trainer.validate("qlearning", "Pendulum-v1", {})
    assert "Discrete actions" in error.value.errors["env_id"]


@pytest.mark.parametrize("env_id, extra", [("FrozenLake-v1", {}), ("MountainCar-v0", {"grid_size": "10"})])
def test_it_trains_saves_the_table_loads_and_evaluates(env_id, extra, tmp_path):
    agent = trainer.make("qlearning", env_id, seed=1, **extra)
    summary = agent.learn(500, checkpoint_dir=tmp_path, eval_episodes=1)
    assert summary["status"] == "succeeded"
    assert np.abs(agent.table).sum() > 0
    loaded = trainer.load(tmp_path / "final.zip")
    assert np.array_equal(loaded.q_table(), agent.q_table())
    assert loaded.epsilon == pytest.approx(agent.epsilon) and agent.epsilon < 1.0
    observations = np.stack([agent.observation_space.sample() for _ in range(20)])
    assert np.array_equal(agent.act(observations, True), loaded.act(observations, True))


def test_the_same_seed_gives_identical_metrics():
    def metrics():
        sink = ListSink()
        frozen_lake().learn(2000, sink=sink, eval_episodes=2)
        return [(e["kind"], e["step"], e["values"]) for e in sink.events if e["kind"] not in ("time", "finished")]

    assert metrics() == metrics()


def test_epsilon_decays_every_step_down_to_its_minimum():
    agent = frozen_lake(exploration_initial_eps=1.0, exploration_decay=0.99, exploration_final_eps=0.05)
    agent.learn(100, eval_episodes=0)
    assert agent.epsilon == pytest.approx(max(0.05, 0.99**100))
    agent.learn(400, eval_episodes=0)
    assert agent.epsilon == pytest.approx(0.05)


def test_the_learning_rate_decays_every_step_down_to_its_minimum():
    agent = frozen_lake(learning_rate=0.5, learning_rate_decay=0.99, learning_rate_min=0.2)
    agent.learn(50, eval_episodes=0)
    assert agent.learning_rate == pytest.approx(0.5 * 0.99**50)
    agent.learn(100, eval_episodes=0)
    assert agent.learning_rate == pytest.approx(0.2)  # 0.5 * 0.99^150 = 0.11 is below the minimum


def test_sub_envs_decay_the_learning_rate_once_per_env_step():
    agent = trainer.make("qlearning", "FrozenLake-v1", seed=0, num_envs=4, learning_rate=0.5,
                         learning_rate_decay=0.99)
    agent.learn(40, eval_episodes=0)
    assert agent.learning_rate == pytest.approx(0.5 * 0.99**40)


def test_the_update_uses_the_decayed_learning_rate():
    # the first update steps by lr_0, the n-th by lr_0 * decay^(n-1): Q_n = target (1 - prod_k (1 - lr_k))
    agent = frozen_lake(learning_rate=0.5, learning_rate_decay=0.9, gamma=0.9)
    agent.table[1] = [2.0, 3.0, 0.0, 0.0]
    target, remaining = 1 + 0.9 * 3, 1.0
    for n in range(5):
        agent.update(np.array([0]), np.array([1]), np.array([1.0]), np.array([1]), np.array([0.0]))
        remaining *= 1 - 0.5 * 0.9**n
        assert agent.table[0, 1] == pytest.approx(target * (1 - remaining))
        agent.learning_rate *= 0.9  # what train() does after every env step


def test_two_sub_envs_updating_one_entry_both_add_their_step():
    agent = frozen_lake(learning_rate=0.5, gamma=0.0)
    agent.update(np.array([3, 3]), np.array([2, 2]), np.array([1.0, 3.0]), np.array([0, 0]), np.array([0.0, 0.0]))
    assert agent.table[3, 2] == pytest.approx(0.5 * 1.0 + 0.5 * 3.0)  # both TD errors from Q = 0


def test_a_checkpoint_keeps_the_decayed_learning_rate(tmp_path):
    agent = frozen_lake(learning_rate=0.5, learning_rate_decay=0.99)
    agent.learn(30, checkpoint_dir=tmp_path, eval_episodes=0)
    assert trainer.load(tmp_path / "final.zip").learning_rate == pytest.approx(0.5 * 0.99**30)


def test_the_minimum_learning_rate_must_not_exceed_the_learning_rate():
    with pytest.raises(trainer.ConfigError) as error:
        trainer.validate("qlearning", "FrozenLake-v1", dict(learning_rate=0.1, learning_rate_min=0.2))
    assert "learning_rate_min" in error.value.errors


def test_grid_index_matches_the_cells_in_c_order():
    grid = Grid(np.array([-1.2, -0.07]), np.array([0.6, 0.07]), np.array([20, 21]))
    observations = np.random.default_rng(0).uniform([-1.5, -0.1], [0.9, 0.1], size=(500, 2))
    observations[:2] = [[-1.2, 0.0], [0.6, 0.07]]
    assert np.array_equal(grid.index(observations), np.ravel_multi_index(tuple(grid.cells(observations).T), (20, 21)))
