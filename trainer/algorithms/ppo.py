"""Proximal Policy Optimization with a clipped surrogate objective and GAE.

Schulman et al. 2017, "Proximal Policy Optimization Algorithms", https://arxiv.org/abs/1707.06347;
GAE from Schulman et al. 2016, https://arxiv.org/abs/1506.02438. The details follow "The 37
implementation details of PPO" (Huang et al. 2022): advantage normalisation per minibatch, clipped
value loss (optional), orthogonal init, Adam eps 1e-5, global gradient clipping, linear annealing of
the learning rate and the clip range, truncations bootstrapped (docs/algorithms.md, P1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.actor_critic import OBSERVATION_SPACES, ActorCritic, PolicyGradientAgent, reported
from trainer.agent import never
from trainer.distributions import ACTION_SPACES
from trainer.cpu_speed import FlatAdam, FlatParameters, clip_grad_norm
from trainer.networks import parse_hidden_layers
from trainer.params import param, processes_param, vectorization_param
from trainer.registry import AlgorithmSpec, POLICY_GRADIENT
from trainer.schedules import SCHEDULES, annealed



@dataclass
class PPOConfig:
    """Defaults are rl-baselines3-zoo's tuned CartPole-v1 settings (500 +- 0 at 100k env steps)."""

    num_envs: int = param(8, "Environments stepped side by side (Gymnasium's vector API).", low=1, high=1024)
    vectorization: str = vectorization_param()
    # rollout length per env; a rollout is n_steps * num_envs transitions
    n_steps: int = param(32, "Env steps per environment in each rollout.", low=1, high=100_000)
    batch_size: int = param(256, "Transitions per minibatch.", low=1, high=1_000_000)
    n_epochs: int = param(20, "Passes over each rollout (at most 100 gradient updates per env "
                              "step in all).", low=1, high=1_000, live=True)
    gamma: float = param(0.98, "Discount factor.", low=0, high=1)
    gae_lambda: float = param(0.8, "GAE lambda: 1 gives Monte-Carlo advantages, 0 one-step TD errors.", low=0, high=1)
    learning_rate: float = param(1e-3, "Adam learning rate (at the start, when annealed).", low=0,
                                 low_inclusive=False, high=1, live=True)
    lr_schedule: str = param("linear", "Learning rate over the run: linear decay to 0, or constant.",
                             choices=SCHEDULES)
    clip_range: float = param(0.2, "Clip range epsilon of the probability ratio (at the start, when annealed).",
                              low=0, low_inclusive=False, high=10, live=True)
    clip_schedule: str = param("linear", "Clip range over the run: linear decay to 0, or constant.",
                               choices=SCHEDULES)
    # PPO2-style value clipping; depends on the reward scale (SB3 leaves it off by default)
    clip_value_loss: bool = param(False, "Clip the value update around the rollout's values.")
    value_clip_range: float = param(0.2, "Clip range of the value update, when clipped.", low=0,
                                    low_inclusive=False)
    entropy_coef: float = param(0.0, "Entropy bonus coefficient.", low=0, high=10, live=True)
    value_coef: float = param(0.5, "Value loss coefficient.", low=0, high=100, live=True)
    max_grad_norm: float = param(0.5, "Clip the global gradient norm to this (0 turns clipping off).", low=0, live=True)
    normalize_advantage: bool = param(True, "Normalise advantages within each minibatch.")
    # 0 turns it off; SB3 stops an epoch's updates when the approximate KL exceeds 1.5 * target_kl
    target_kl: float = param(0.0, "Stop the update's epochs early when the approximate KL divergence exceeds "
                                  "1.5 x this (0: never).", low=0, live=True)
    normalize_observations: bool = param(False, "Running mean/std normalisation of observations (saved in "
                                                "checkpoints, frozen at evaluation).")
    normalize_rewards: bool = param(False, "Scale rewards by the running std of the discounted return.")
    hidden_layers: str = param("64,64", "Hidden layer sizes of the actor and the critic, comma-separated.")
    activation: str = param("tanh", "Hidden layer activation.", choices=("tanh", "relu"))
    shared_network: bool = param(False, "One trunk for actor and critic instead of two separate MLPs.")
    orthogonal_init: bool = param(True, "Orthogonal initialisation (gain sqrt 2 hidden, 0.01 policy, 1 value).")
    log_std_init: float = param(0.0, "Initial log standard deviation of Gaussian policies (Box actions).",
                                low=-20, high=5)
    optimizer_epsilon: float = param(1e-5, "Adam epsilon.", low=0, low_inclusive=False, high=1)
    # the image encoder (the Nature CNN) is nearly all of PPO's time on Atari; its heads stay float32
    precision: str = param("float32", "The image encoder's passes in float32, or in bfloat16 (mixed precision: about "
                                      "2x faster on CPUs with AMX and on recent GPUs, much slower on CPUs without "
                                      "AVX512-BF16); the heads, log-probabilities and values stay float32.",
                           choices=("float32", "bfloat16"))
    processes: int = processes_param()

    def check(self) -> dict[str, str]:
        errors = {}
        if self.batch_size > self.n_steps * self.num_envs:
            errors["batch_size"] = f"must not exceed a rollout (n_steps x num_envs = {self.n_steps * self.num_envs})"
        return errors


def clipped_surrogate_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                           clip_range: float) -> tuple[torch.Tensor, torch.Tensor]:
    """-E[min(r A, clip(r, 1 - eps, 1 + eps) A)] with r = pi(a|s) / pi_old(a|s); also returns log r."""
    log_ratio = log_probs - old_log_probs
    ratio = log_ratio.exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_range, 1.0 + clip_range) * advantages
    return -torch.min(unclipped, clipped).mean(), log_ratio


@torch.no_grad()
def ratio_statistics(log_ratio: torch.Tensor, clip_range: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(approximate KL E[(r - 1) - log r], Schulman's low-variance estimator; fraction of clipped ratios)."""
    ratio = log_ratio.exp()
    return ((ratio - 1.0) - log_ratio).mean(), ((ratio - 1.0).abs() > clip_range).float().mean()


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               clip_range: float | None) -> torch.Tensor:
    """E[(V - R)^2], or with clipping E[max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)]
    where V_old is the value when the rollout was collected (PPO2 / CleanRL)."""
    unclipped = (values - returns) ** 2
    if clip_range is None:
        return unclipped.mean()
    clipped_values = old_values + (values - old_values).clamp(-clip_range, clip_range)
    return torch.max(unclipped, (clipped_values - returns) ** 2).mean()


class PPO(PolicyGradientAgent):
    name = "ppo"
    numpy_acting = True  # measured again against b3c25c5: 1.15x in whole CartPole runs (docs/benchmarks.md)
    value_heads = 1

    def build(self) -> None:
        c = self.config
        self.network = ActorCritic(self.observation_space, self.action_space, parse_hidden_layers(c.hidden_layers),
                                   c.activation, c.shared_network, self.value_heads, c.orthogonal_init,
                                   c.log_std_init).to(self.device)
        self.network.bfloat16_encoder = c.precision == "bfloat16"
        self.flat = FlatParameters(self.network.parameters())
        self.optimizer = FlatAdam([self.flat.param], lr=c.learning_rate, eps=c.optimizer_epsilon)
        self.modules = {"network": self.network}
        self.optimizers = {"optimizer": self.optimizer}
        self.build_normalizers(self.local_envs)

    def minibatch_loss(self, batch, clip_range: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The loss to minimise on one minibatch, L = L_clip + c_v L_value - c_ent H, and the statistics
        to report (approx_kl among them)."""
        c = self.config
        distribution, values = self.network(batch.obs)
        log_probs = distribution.log_prob(batch.actions)
        # advantages come normalised per minibatch, if asked (a batch of one is left alone: SB3 #325)
        policy_loss, log_ratio = clipped_surrogate_loss(log_probs, batch.log_probs, batch.advantages, clip_range)
        v_loss = value_loss(values.squeeze(-1), batch.values, batch.returns,
                            c.value_clip_range if c.clip_value_loss else None)
        loss = policy_loss + c.value_coef * v_loss
        entropy = distribution.entropy().mean() if c.entropy_coef > 0 else None
        if entropy is not None:
            loss = loss - c.entropy_coef * entropy
        with torch.no_grad():
            approx_kl, clip_fraction = ratio_statistics(log_ratio, clip_range)
            if entropy is None:
                entropy = distribution.entropy().mean()
        return loss, {"loss": loss, "policy_loss": policy_loss, "value_loss": v_loss, "entropy": entropy,
                      "approx_kl": approx_kl, "clip_fraction": clip_fraction}

    def update(self, buffer, progress: float, should_stop=never) -> dict[str, float]:
        """`n_epochs` passes over the rollout in shuffled minibatches, one Adam step on `minibatch_loss`
        each (RND-PPO's too, with its predictor's optimizer beside the network's)."""
        c = self.config
        learning_rate = annealed(c.learning_rate, c.lr_schedule, progress)
        clip_range = annealed(c.clip_range, c.clip_schedule, progress)
        optimizers = list(self.optimizers.values())
        for optimizer in optimizers:
            for group in optimizer.param_groups:
                group["lr"] = learning_rate
        flats = [group["params"][0] for optimizer in optimizers for group in optimizer.param_groups]
        logged: list[dict[str, torch.Tensor]] = []
        # on several processes each holds its share of the rollout and of every minibatch (trainer/distributed.py)
        batches = buffer.epochs(c.n_epochs, c.batch_size // self.group.size, self.rng, c.normalize_advantage,
                                self.group)
        for _, batch in batches:
            if should_stop():  # a cancel ends the epochs within a second
                break
            loss, statistics = self.minibatch_loss(batch, clip_range)
            if c.target_kl > 0 and self.group.average(statistics["approx_kl"]) > 1.5 * c.target_kl:
                break  # the policy moved too far from the one that collected the data: no more epochs
            # the statistics are reported as means over every minibatch trained on, in all epochs (as SB3 does)
            logged.append(statistics)
            for flat in flats:
                flat.grad.zero_()
            loss.backward()
            self.group.average_gradients(flats)  # the whole minibatch's gradient, on every process
            if c.max_grad_norm > 0:  # the policy and value network's gradient only
                clip_grad_norm([self.flat], c.max_grad_norm)
            for optimizer in optimizers:
                optimizer.step()
        metrics = {f"train/{name}": reported(torch.stack([row[name].detach() for row in logged]).mean())
                   for name in logged[0]} if logged else {}
        metrics.update({"train/learning_rate": learning_rate, "train/clip_range": clip_range,
                        "train/explained_variance": explained_variance(buffer.values, buffer.returns)})
        return metrics

    def train(self, runner) -> None:
        c = self.config
        with self.training_envs(self.local_envs) as (envs, observations):
            buffer = self.new_buffer(c.n_steps, self.local_envs)
            observations = self.normalize_obs(observations, update=True)
            while True:
                observations, last_values, keep_going = self.collect(runner, envs, buffer, observations)
                if not buffer.full:
                    return  # stopped in the middle of a rollout
                buffer.compute_advantages(last_values[:, 0], c.gamma, c.gae_lambda)
                runner.record(self.update(buffer, runner.progress, runner.should_stop))
                if not keep_going:
                    return


def explained_variance(predictions, targets) -> float:
    """1 - Var[target - prediction] / Var[target]: 1 is a perfect critic, 0 no better than a constant
    (reported as 0 when the targets do not vary). Takes tensors or arrays."""
    predictions, targets = torch.as_tensor(predictions), torch.as_tensor(targets)
    variance = float(targets.var(correction=0))
    return 0.0 if variance == 0 else 1.0 - float((targets - predictions).var(correction=0)) / variance


SPEC = AlgorithmSpec(
    name="ppo",
    family=POLICY_GRADIENT,
    description="Proximal Policy Optimization: clipped surrogate, GAE, minibatch epochs (Schulman et al. 2017).",
    config_class=PPOConfig,
    agent_class=PPO,
    observation_spaces=OBSERVATION_SPACES,
    action_spaces=ACTION_SPACES,
)
