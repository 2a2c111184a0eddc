"""Names vulture cannot see being used: read by a framework through reflection, or record
fields kept for whoever inspects the object. ``make lint`` passes this file to vulture
with the code (configuration in pyproject.toml, [tool.vulture]); a new entry says who
reads the name.
"""

# ruff: noqa: B018, F821

# transformers reads these class attributes and calls these hooks on PreTrainedModel
config_class
base_model_prefix
_init_weights
get_input_embeddings
set_input_embeddings

# pandera: a DataFrameModel's annotated fields are its columns, its Config is read by name
output_length
steps_ratio
unmasked_ratio
block_ratio
conf_min
conf_q25
conf_median
conf_mean
conf_q75
step_kind
step_conf_min
step_conf_q25
step_conf_median
step_conf_mean
step_conf_q75
strict
coerce

# pydantic: model_config is read by the metaclass; fields of a response model are serialised
model_config
total_tokens

# tokenizers and numpy: attributes assigned to configure the object
pre_tokenizer
writeable

# marimo writes __generated_with into every notebook and reads it back
__generated_with

# pytest: module-level marks and conftest hooks are read by name
pytestmark
pytest_collection_modifyitems

# Dagster: an asset's parameters name its upstream assets (a dependency, even when unread)
step_dynamics

# pytest fixtures requested for their side effect (a running cluster, built artifacts)
ray_cluster
artifacts_built

# record fields, kept on the result for whoever inspects it (printed, logged, or in tests)
oneshot_steps_per_token  # predict.lgbm.TrainedPredictor (the same numbers go to the metadata)
train_requests  # predict.lgbm.TrainedPredictor
method  # reconfig.stage2.Placement: "ilp" or "greedy"
submissions  # serve.app_logic: counts submissions, so the page's cell re-runs on each

# set and never read, in files under rework elsewhere; to review there
calls  # control.predictions.PredictionCache
calibrated_on  # control.predictions.PredictionCache
finish_time  # control.request.TrackedRequest, set by schedule.scheduler

# Python calls a module's __getattr__ for a name it lacks (PEP 562: dilaserve.engine's lazy names)
__getattr__

# pydantic: OpenAI request fields the API accepts (and validates or refuses by name) but
# whose value the server does not read further
include_usage
stream_options
top_p
presence_penalty
frequency_penalty
logit_bias
user
logprobs
echo
best_of
top_logprobs

# Ray reads this module constant (set by dilaserve.cluster.ray_local.loopback_only)
ENABLE_RAY_CLUSTER

# http.server calls its handler's methods and reads its attributes by name (a test's
# loopback server: tests/bench/test_lean_client.py)
protocol_version
do_POST
log_message
