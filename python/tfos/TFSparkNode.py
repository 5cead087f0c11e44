"""What runs inside Spark tasks: node tasks start tfos node agents, feed tasks
stream partitions into the node on their own executor.

The code lives in tfos._spark (nodes.py: node tasks and which executor a task
is on; feeding.py: feed and inference tasks); this module keeps
TensorFlowOnSpark's name.
"""
from ._spark.feeding import (FeedTaskError, NodeLost, _NodeLock, _wait_consumed, feed_task,  # noqa: F401
                             feed_task_arrow, inference_task)
from ._spark.nodes import (TASK_JOBS_BLOCKING, NodeSpec, _pid_alive, _ppid, _wait_pid_gone,  # noqa: F401
                           executor_jvm_pid, executor_key, gpu_addresses, host_address, local_nodes,
                           node_task, start_node)

__all__ = ["NodeSpec", "node_task", "feed_task", "feed_task_arrow", "inference_task", "executor_key",
           "NodeLost"]
