//! Configuration: the YAML files under `$POLYPHONY_HOME` loaded into validated typed config.

pub mod model;
