"""One module per algorithm family; importing this package registers them all."""

from trainer.algorithms import dqn  # noqa: F401
from trainer.algorithms import sac  # noqa: F401
from trainer.algorithms import ppo  # noqa: F401
from trainer.algorithms import a2c  # noqa: F401
from trainer.algorithms import reinforce  # noqa: F401
from trainer.algorithms import vpg  # noqa: F401
from trainer.algorithms import rnd_ppo  # noqa: F401
from trainer.algorithms import ddpg  # noqa: F401
from trainer.algorithms import qlearning  # noqa: F401
from trainer.algorithms import es  # noqa: F401
from trainer.algorithms import r2d1  # noqa: F401
