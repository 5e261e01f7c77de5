"""Advantage Actor-Critic (A2C), the synchronous version of A3C.

Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning", https://arxiv.org/abs/1602.01783.
n-step returns bootstrapped from the critic (not across episode ends, but across time-limit truncations),
one full-batch gradient step per rollout, RMSprop. Defaults are SB3's, which rl-baselines3-zoo uses for
CartPole-v1 (500 +- 0 at 500k env steps); the option names are the ones every
algorithm here uses; Lightning Bolts' (`entropy_beta`, `critic_beta`) and pytorchrl's (`lr_pi`, `lr_v`) are
accepted as aliases (trainer/params.py).
"""

from __future__ import annotations

from dataclasses import dataclass


from trainer.actor_critic import OBSERVATION_SPACES, ActorCritic, PolicyGradientAgent, reported
from trainer.algorithms.ppo import explained_variance
from trainer.distributions import ACTION_SPACES
from trainer.cpu_speed import FlatAdam, FlatParameters, FlatRMSprop, clip_grad_norm
from trainer.networks import parse_hidden_layers
from trainer.optimizers import RMSpropTFLike
from trainer.params import param, processes_param, vectorization_param
from trainer.registry import AlgorithmSpec, POLICY_GRADIENT
from trainer.schedules import SCHEDULES, annealed


@dataclass
class A2CConfig:
    """Defaults: SB3's A2C (8 envs as in the zoo's CartPole-v1 run)."""

    num_envs: int = param(8, "Environments stepped side by side.", low=1, high=1024)
    vectorization: str = vectorization_param()
    # the first step of a rollout looks n_steps ahead before bootstrapping from the critic
    n_steps: int = param(5, "Env steps per environment between updates (the n of the n-step returns).",
                         low=1, high=100_000)
    gamma: float = param(0.99, "Discount factor.", low=0, high=1)
    policy_learning_rate: float = param(7e-4, "Learning rate of the policy (and of the shared trunk, when shared).",
                                        low=0, low_inclusive=False, high=1, live=True)
    critic_learning_rate: float = param(7e-4, "Learning rate of the value function.", low=0, low_inclusive=False,
                                        high=1, live=True)
    lr_schedule: str = param("constant", "Learning rates over the run: linear decay to 0, or constant.",
                             choices=SCHEDULES)
    # PyTorch's RMSprop puts epsilon outside the square root, TensorFlow inside (SB3 #110); rmsprop_tf
    # matches the original A2C and baselines (used for Atari in the zoo)
    optimizer: str = param("rmsprop", "Optimizer: rmsprop (PyTorch), rmsprop_tf (TensorFlow's, as in the "
                                      "original A2C) or adam.", choices=("rmsprop", "rmsprop_tf", "adam"))
    rmsprop_alpha: float = param(0.99, "RMSprop smoothing constant.", low=0, high=1, high_inclusive=False)
    optimizer_epsilon: float = param(1e-5, "Optimizer epsilon.", low=0, low_inclusive=False, high=1)
    entropy_coef: float = param(0.0, "Entropy bonus coefficient.", low=0, high=10, live=True)
    value_coef: float = param(0.5, "Value loss coefficient.", low=0, high=100, live=True)
    max_grad_norm: float = param(0.5, "Clip the gradient norm to this (0 turns clipping off).", low=0, live=True)
    # SB3 default off: A2C's batches are small (docs/algorithms.md, A2C)
    normalize_advantage: bool = param(False, "Normalise the advantages of each update.")
    normalize_observations: bool = param(False, "Running mean/std normalisation of observations (saved in "
                                                "checkpoints, frozen at evaluation).")
    normalize_rewards: bool = param(False, "Scale rewards by the running std of the discounted return.")
    hidden_layers: str = param("64,64", "Hidden layer sizes of the actor and the critic, comma-separated.")
    activation: str = param("tanh", "Hidden layer activation.", choices=("tanh", "relu"))
    shared_network: bool = param(False, "One trunk for actor and critic instead of two separate MLPs.")
    orthogonal_init: bool = param(True, "Orthogonal initialisation (gain sqrt 2 hidden, 0.01 policy, 1 value).")
    log_std_init: float = param(0.0, "Initial log standard deviation of Gaussian policies (Box actions).",
                                low=-20, high=5)
    processes: int = processes_param()


class A2C(PolicyGradientAgent):
    name = "a2c"
    numpy_acting = True  # a rollout step is a large part of A2C's work (5 steps per update)

    def build(self) -> None:
        c = self.config
        self.network = ActorCritic(self.observation_space, self.action_space, parse_hidden_layers(c.hidden_layers),
                                   c.activation, c.shared_network, 1, c.orthogonal_init,
                                   c.log_std_init).to(self.device)
        # one parameter group per learning rate; each group is one flat tensor (see FlatParameters)
        self.actor_flat = FlatParameters(self.network.actor_parameters())
        self.critic_flat = FlatParameters(self.network.critic_parameters())
        groups = [{"params": [self.actor_flat.param], "lr": c.policy_learning_rate},
                  {"params": [self.critic_flat.param], "lr": c.critic_learning_rate}]
        if c.optimizer == "adam":
            self.optimizer = FlatAdam(groups, eps=c.optimizer_epsilon)
        elif c.optimizer == "rmsprop":
            self.optimizer = FlatRMSprop(groups, alpha=c.rmsprop_alpha, eps=c.optimizer_epsilon)
        else:
            self.optimizer = RMSpropTFLike(groups, alpha=c.rmsprop_alpha, eps=c.optimizer_epsilon)
        self.modules = {"network": self.network}
        self.optimizers = {"optimizer": self.optimizer}
        self.build_normalizers(self.local_envs)

    def learning_rate_groups(self) -> dict[str, list[dict]]:
        actor, critic = self.optimizer.param_groups
        return {"policy_learning_rate": [actor], "critic_learning_rate": [critic]}

    def update(self, buffer, progress: float) -> dict[str, float]:
        c = self.config
        rates = (c.policy_learning_rate, c.critic_learning_rate)
        for group, learning_rate in zip(self.optimizer.param_groups, rates):
            group["lr"] = annealed(learning_rate, c.lr_schedule, progress)
        batch = buffer.everything()  # one gradient step on the whole rollout (this process's share of it)
        distribution, values = self.network(batch.obs)
        log_probs = distribution.log_prob(batch.actions)
        # A_t = G_t - V(s_t), with G_t the n-step return (the buffer detached both)
        advantages = batch.advantages
        if c.normalize_advantage:  # over the whole rollout, every process's share of it
            advantages = self.group.normalized(advantages)
        policy_loss = -(advantages * log_probs).mean()
        value_loss = ((batch.returns - values.squeeze(-1)) ** 2).mean()
        entropy = distribution.entropy().mean()
        loss = policy_loss + c.value_coef * value_loss - c.entropy_coef * entropy
        self.actor_flat.zero_grad()
        self.critic_flat.zero_grad()
        loss.backward()
        self.group.average_gradients([self.actor_flat.param, self.critic_flat.param])
        if c.max_grad_norm > 0:
            clip_grad_norm([self.actor_flat, self.critic_flat], c.max_grad_norm)
        self.optimizer.step()
        return {"train/loss": reported(loss), "train/policy_loss": reported(policy_loss),
                "train/value_loss": reported(value_loss), "train/entropy": reported(entropy),
                "train/learning_rate": self.optimizer.param_groups[0]["lr"],
                "train/explained_variance": explained_variance(buffer.values, buffer.returns)}

    def train(self, runner) -> None:
        c = self.config
        with self.training_envs(self.local_envs) as (envs, observations):
            buffer = self.new_buffer(c.n_steps, self.local_envs)
            observations = self.normalize_obs(observations, update=True)
            while True:
                observations, last_values, keep_going = self.collect(runner, envs, buffer, observations)
                if not buffer.full:
                    return  # stopped in the middle of a rollout
                buffer.compute_n_step_returns(last_values[:, 0], c.gamma)
                runner.record(self.update(buffer, runner.progress))
                if not keep_going:
                    return


SPEC = AlgorithmSpec(
    name="a2c",
    family=POLICY_GRADIENT,
    description="Advantage Actor-Critic: n-step returns, synchronous vector envs, RMSprop (Mnih et al. 2016).",
    config_class=A2CConfig,
    agent_class=A2C,
    observation_spaces=OBSERVATION_SPACES,
    action_spaces=ACTION_SPACES,
)
