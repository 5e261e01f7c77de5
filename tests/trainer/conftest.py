"""The trainer tests run torch single-threaded, as training workers do (TORCH_THREADS, `--threads`).

Small networks gain nothing from a second thread, and on a busy machine every parallel region of a
tiny op waits for a descheduled thread: a log-softmax over 8 rows took 0.5 ms instead of 2 us.
"""

import torch

torch.set_num_threads(1)
