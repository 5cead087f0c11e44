"""A node program that reports three steps (loss = 1/step + rank) and, on
rank 0, logs a parameter through MLflow's own client: with tfos yarn
--mlflow both land in the job's one run (MLFLOW_RUN_ID)."""
import time

import tfos

ctx = tfos.TFNode.get_context()
for step in range(1, 4):
    ctx.report(step=step, loss=1.0 / step + ctx.executor_id)
    time.sleep(0.6)
if ctx.executor_id == 0:
    try:
        import mlflow
    except ImportError:
        pass
    else:
        mlflow.log_param("lr", "0.01")
print("reported", flush=True)
