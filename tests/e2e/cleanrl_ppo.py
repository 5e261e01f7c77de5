"""A small PPO in CleanRL's style (one file: CartPole, vector envs, GAE, clipped surrogate), logging through
rlweb_client the way CleanRL's scripts log to TensorBoard: `charts/...` and `losses/...` with the global step.
Written for tests/e2e/test_client_logging.py, which runs it in a subprocess against a live site.

    RLWEB_URL=... RLWEB_TOKEN=... python cleanrl_ppo.py [--wait-for-page] [--seconds 12]

It prints the run's page first; with --wait-for-page it waits for a line on stdin before training. --seconds paces
the updates so the run lasts at least that long (the browser test watches the curve grow). At the end it writes
logged.json: the steps and values of every return it logged and how many loss points, to compare with what the page
drew.
"""

import argparse
import json
import random
import sys
import time

import gymnasium as gym
import numpy as np
import rlweb_client
import torch
from torch import nn
from torch.distributions import Categorical

parser = argparse.ArgumentParser()
parser.add_argument("--env-id", default="CartPole-v1")
parser.add_argument("--total-timesteps", type=int, default=16_384)
parser.add_argument("--num-envs", type=int, default=4)
parser.add_argument("--num-steps", type=int, default=128)
parser.add_argument("--learning-rate", type=float, default=2.5e-3)
parser.add_argument("--gamma", type=float, default=0.99)
parser.add_argument("--gae-lambda", type=float, default=0.95)
parser.add_argument("--update-epochs", type=int, default=4)
parser.add_argument("--num-minibatches", type=int, default=4)
parser.add_argument("--clip-coef", type=float, default=0.2)
parser.add_argument("--ent-coef", type=float, default=0.01)
parser.add_argument("--vf-coef", type=float, default=0.5)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--seconds", type=float, default=0.0)
parser.add_argument("--wait-for-page", action="store_true")
args = parser.parse_args()
batch_size = args.num_envs * args.num_steps
minibatch_size = batch_size // args.num_minibatches
num_updates = args.total_timesteps // batch_size

run = rlweb_client.init(experiment="cleanrl-ppo", config=vars(args), offline_dir="offline", retry_delay=0.2,
                        max_retry_delay=1.0)
print(run.url, flush=True)
if args.wait_for_page:
    sys.stdin.readline()

random.seed(args.seed)
np.random.seed(args.seed)
torch.manual_seed(args.seed)
torch.set_num_threads(1)
envs = gym.wrappers.vector.RecordEpisodeStatistics(
    gym.vector.SyncVectorEnv([lambda: gym.make(args.env_id) for _ in range(args.num_envs)]))
obs_size, actions = envs.single_observation_space.shape[0], envs.single_action_space.n


def layer(inputs: int, outputs: int, std: float = np.sqrt(2)) -> nn.Linear:
    linear = nn.Linear(inputs, outputs)
    nn.init.orthogonal_(linear.weight, std)
    nn.init.constant_(linear.bias, 0.0)
    return linear


critic = nn.Sequential(layer(obs_size, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 1, 1.0))
actor = nn.Sequential(layer(obs_size, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, actions, 0.01))
optimizer = torch.optim.Adam([*critic.parameters(), *actor.parameters()], lr=args.learning_rate, eps=1e-5)

observations = torch.zeros((args.num_steps, args.num_envs, obs_size))
taken = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long)
logprobs = torch.zeros((args.num_steps, args.num_envs))
rewards = torch.zeros((args.num_steps, args.num_envs))
dones = torch.zeros((args.num_steps, args.num_envs))
values = torch.zeros((args.num_steps, args.num_envs))

logged = {"returns": [], "return_values": [], "losses": 0}
global_step, started = 0, time.monotonic()
next_obs = torch.tensor(envs.reset(seed=args.seed)[0], dtype=torch.float32)
next_done = torch.zeros(args.num_envs)
for update in range(num_updates):
    optimizer.param_groups[0]["lr"] = args.learning_rate * (1.0 - update / num_updates)
    for step in range(args.num_steps):
        global_step += args.num_envs
        observations[step], dones[step] = next_obs, next_done
        with torch.no_grad():
            distribution = Categorical(logits=actor(next_obs))
            action = distribution.sample()
            values[step] = critic(next_obs).flatten()
        taken[step], logprobs[step] = action, distribution.log_prob(action)
        obs, reward, terminated, truncated, infos = envs.step(action.numpy())
        rewards[step] = torch.tensor(reward, dtype=torch.float32)
        next_obs = torch.tensor(obs, dtype=torch.float32)
        next_done = torch.tensor(np.logical_or(terminated, truncated), dtype=torch.float32)
        for index in np.flatnonzero(infos.get("_episode", [])):
            episodic_return = float(infos["episode"]["r"][index])
            run.log({"charts/episodic_return": episodic_return,
                     "charts/episodic_length": int(infos["episode"]["l"][index])}, step=global_step)
            logged["returns"].append(global_step)
            logged["return_values"].append(episodic_return)

    with torch.no_grad():  # generalized advantage estimation, bootstrapped from the value of the next observation
        next_value = critic(next_obs).flatten()
        advantages = torch.zeros_like(rewards)
        last = 0.0
        for step in reversed(range(args.num_steps)):
            not_done = 1.0 - (next_done if step == args.num_steps - 1 else dones[step + 1])
            following = next_value if step == args.num_steps - 1 else values[step + 1]
            delta = rewards[step] + args.gamma * following * not_done - values[step]
            advantages[step] = last = delta + args.gamma * args.gae_lambda * not_done * last
        returns = advantages + values

    flat = (observations.reshape(-1, obs_size), taken.reshape(-1), logprobs.reshape(-1), advantages.reshape(-1),
            returns.reshape(-1))
    for epoch in range(args.update_epochs):
        order = np.random.permutation(batch_size)
        for start in range(0, batch_size, minibatch_size):
            batch = order[start:start + minibatch_size]
            batch_obs, batch_actions, batch_logprobs, batch_advantages, batch_returns = (part[batch] for part in flat)
            distribution = Categorical(logits=actor(batch_obs))
            ratio = (distribution.log_prob(batch_actions) - batch_logprobs).exp()
            batch_advantages = (batch_advantages - batch_advantages.mean()) / (batch_advantages.std() + 1e-8)
            policy_loss = torch.max(-batch_advantages * ratio,
                                    -batch_advantages * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
            value_loss = 0.5 * ((critic(batch_obs).flatten() - batch_returns) ** 2).mean()
            entropy = distribution.entropy().mean()
            loss = policy_loss - args.ent_coef * entropy + args.vf_coef * value_loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_([*critic.parameters(), *actor.parameters()], 0.5)
            optimizer.step()

    run.log({"losses/value_loss": value_loss.item(), "losses/policy_loss": policy_loss.item(),
             "losses/entropy": entropy.item(), "charts/learning_rate": optimizer.param_groups[0]["lr"],
             "charts/SPS": global_step / (time.monotonic() - started)}, step=global_step)
    logged["losses"] += 1
    time.sleep(max(0.0, started + (update + 1) * args.seconds / num_updates - time.monotonic()))

run.finish()
with open("logged.json", "w") as file:
    json.dump(logged, file)
print("finished", flush=True)
