//! [`WorkerRuntime`] on the Docker engine through bollard (spec §8).
//!
//! Owns the engine calls only: no line splitting, classification or status decisions
//! (those live in `stream` and `orchestrator::execute`). The only place host env values for a container
//! are read; they go into the create request and nowhere else (not into errors or logs).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bollard::container::LogOutput;
use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount, MountType, ResourcesUlimits,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, KillContainerOptionsBuilder,
    ListContainersOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
    WaitContainerOptionsBuilder,
};
use bollard::Docker;
use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};

use super::container_spec::{ContainerSpec, LOG_MAX_SIZE, ULIMITS};
use super::staging::{self, Staged};
use super::{
    ContainerInfo, ContainerSummary, EgressEndpoint, EgressPlan, LogChunk, NetworkSummary,
    RunState, RuntimeError, WorkerRuntime, LABEL_HOME,
};
use crate::domain::EventStream;

/// What the engine says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineVersion {
    /// Engine release, e.g. `20.10.24`.
    pub version: String,
    /// Highest API version the engine speaks, e.g. `1.41`.
    pub api_version: String,
    /// The API version this client negotiated.
    pub negotiated_api: String,
}

/// The Docker engine. Cheap to clone (bollard's client is reference counted).
#[derive(Debug, Clone)]
pub struct DockerRuntime {
    docker: Docker,
    /// Staging directories (credential copies, stdin) of containers created by this
    /// process, by container id; dropped (deleted) when the container is removed.
    staged: Arc<Mutex<HashMap<String, Staged>>>,
    /// The egress proxy image's tag, once ensured by this process (made again when the
    /// image is found gone, [`DockerRuntime::proxy_image_but`]).
    proxy_image: Arc<tokio::sync::Mutex<Option<String>>>,
    /// The polyphony binary the proxy image is made of; `None`: `proxy_image::proxy_binary`.
    proxy_binary: Option<std::path::PathBuf>,
    /// Whether an image's entrypoint holds its command (`WorkerRuntime::holds`), by image.
    holds: Arc<Mutex<HashMap<String, bool>>>,
}

impl DockerRuntime {
    /// Connects with `DOCKER_HOST` (or the local socket) and negotiates the API version,
    /// so an older engine (20.10, API 1.41) is spoken to in its own version.
    pub async fn connect() -> Result<Self, RuntimeError> {
        let docker = Docker::connect_with_defaults().map_err(connect_error)?;
        let docker = docker.negotiate_version().await.map_err(connect_error)?;
        docker.ping().await.map_err(connect_error)?;
        Ok(DockerRuntime::from_client(docker))
    }

    pub fn from_client(docker: Docker) -> Self {
        DockerRuntime {
            docker,
            staged: Arc::default(),
            proxy_image: Arc::default(),
            proxy_binary: None,
            holds: Arc::default(),
        }
    }

    /// Makes the egress proxy image of `binary` (a test driving the library from another
    /// executable passes the built `polyphony`).
    pub fn with_proxy_binary(mut self, binary: impl Into<std::path::PathBuf>) -> Self {
        self.proxy_binary = Some(binary.into());
        self.proxy_image = Arc::default();
        self
    }

    fn forget_staged(&self, id: &str) {
        if let Ok(mut staged) = self.staged.lock() {
            staged.remove(id);
        }
    }

    /// The bollard client, for image builds (`test_image`).
    pub fn client(&self) -> &Docker {
        &self.docker
    }

    /// The engine's version and API version, and the API version spoken to it (`doctor`).
    pub async fn engine_version(&self) -> Result<EngineVersion, RuntimeError> {
        let v = self
            .docker
            .version()
            .await
            .map_err(|e| engine("version", e))?;
        Ok(EngineVersion {
            version: v.version.unwrap_or_else(|| "unknown".into()),
            api_version: v.api_version.unwrap_or_else(|| "unknown".into()),
            negotiated_api: self.docker.client_version().to_string(),
        })
    }

    /// Whether `image` (name:tag or id) exists in the engine (`doctor`, before a run).
    pub async fn image_present(&self, image: &str) -> Result<bool, RuntimeError> {
        match self.docker.inspect_image(image).await {
            Ok(_) => Ok(true),
            Err(e) if is_status(&e, 404) => Ok(false),
            Err(e) => Err(engine("inspect image", e)),
        }
    }

    /// Whether a network named `name` exists in the engine (`doctor`: a profile's
    /// `network: network:NAME` naming none fails every attempt at container create).
    pub async fn network_present(&self, name: &str) -> Result<bool, RuntimeError> {
        match self.docker.inspect_network(name, None).await {
            Ok(_) => Ok(true),
            Err(e) if is_status(&e, 404) => Ok(false),
            Err(e) => Err(engine("inspect network", e)),
        }
    }

    /// Creates a user-defined bridge network labelled for `home_label` and returns its
    /// gateway address: a host-side service bound there (the scripted model API of
    /// `demo --real-claude`) is reachable from containers on this network only.
    pub async fn create_network(
        &self,
        name: &str,
        home_label: &str,
    ) -> Result<std::net::IpAddr, RuntimeError> {
        let request = bollard::models::NetworkCreateRequest {
            name: name.to_string(),
            driver: Some("bridge".into()),
            labels: Some(HashMap::from([(
                LABEL_HOME.to_string(),
                home_label.to_string(),
            )])),
            ..Default::default()
        };
        self.docker
            .create_network(request)
            .await
            .map_err(|e| engine("create network", e))?;
        let inspect = self
            .docker
            .inspect_network(name, None)
            .await
            .map_err(|e| engine("inspect network", e))?;
        inspect
            .ipam
            .and_then(|i| i.config)
            .into_iter()
            .flatten()
            .find_map(|c| c.gateway.and_then(|g| g.parse().ok()))
            .ok_or_else(|| RuntimeError::Engine {
                op: "inspect network",
                message: format!("network {name} has no IPv4 gateway"),
            })
    }

    /// The proxy image for this process's binary, built on first use (`proxy_image`).
    pub async fn proxy_image(&self) -> Result<String, RuntimeError> {
        self.proxy_image_but(None).await
    }

    /// The cached proxy image, unless it is `gone` (a create found it missing: removed
    /// while this process ran), else built (again, unless another attempt did meanwhile).
    async fn proxy_image_but(&self, gone: Option<&str>) -> Result<String, RuntimeError> {
        let mut cached = self.proxy_image.lock().await;
        if let Some(tag) = cached.as_ref().filter(|t| Some(t.as_str()) != gone) {
            return Ok(tag.clone());
        }
        if let Some(gone) = gone {
            tracing::warn!(image = %gone, "the egress proxy image was removed while this process ran; building it again");
        }
        let tag = self.ensure_proxy_image().await?;
        *cached = Some(tag.clone());
        Ok(tag)
    }

    async fn ensure_proxy_image(&self) -> Result<String, RuntimeError> {
        let binary = match &self.proxy_binary {
            Some(b) => b.clone(),
            None => super::proxy_image::proxy_binary()?,
        };
        super::proxy_image::ensure_proxy_image(&self.docker, &binary).await
    }

    /// The egress proxy images on this engine: `polyphony-egress:*`, and untagged ones
    /// carrying its label (`proxy_image::PROXY_IMAGE_LABEL`), for `cleanup`.
    pub async fn proxy_images(&self) -> Result<Vec<super::proxy_image::ImageFact>, RuntimeError> {
        let (key, value) = super::proxy_image::PROXY_IMAGE_LABEL;
        let prefix = format!("{}:", super::proxy_image::PROXY_IMAGE_REPO);
        let mut out: Vec<super::proxy_image::ImageFact> = Vec::new();
        for filters in [
            HashMap::from([(
                "reference".to_string(),
                vec![super::proxy_image::PROXY_IMAGE_REPO.to_string()],
            )]),
            HashMap::from([
                ("label".to_string(), vec![format!("{key}={value}")]),
                ("dangling".to_string(), vec!["true".to_string()]),
            ]),
        ] {
            let options = bollard::query_parameters::ListImagesOptions {
                filters: Some(filters),
                ..Default::default()
            };
            let found = self
                .docker
                .list_images(Some(options))
                .await
                .map_err(|e| engine("list images", e))?;
            for image in found {
                if out.iter().any(|o| o.id == image.id) {
                    continue;
                }
                out.push(super::proxy_image::ImageFact {
                    tags: image
                        .repo_tags
                        .into_iter()
                        .filter(|t| t.starts_with(&prefix))
                        .collect(),
                    bytes: u64::try_from(image.size).unwrap_or(0),
                    id: image.id,
                });
            }
        }
        Ok(out)
    }

    /// Removes image `reference` (a tag: the image goes with its last one); `Ok(false)`
    /// when a container still uses it (the engine refuses, 409). One already gone is
    /// removed.
    pub async fn remove_image(&self, reference: &str) -> Result<bool, RuntimeError> {
        let options = bollard::query_parameters::RemoveImageOptions {
            force: false,
            noprune: false,
            ..Default::default()
        };
        match self
            .docker
            .remove_image(reference, Some(options), None)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_status(&e, 409) => Ok(false),
            Err(e) if is_status(&e, 404) => Ok(true),
            Err(e) => Err(engine("remove image", e)),
        }
    }

    /// Force-removes a network with the containers of this home still attached to it.
    async fn remove_network_and_members(&self, name: &str) -> Result<(), RuntimeError> {
        let inspect = match self.docker.inspect_network(name, None).await {
            Ok(n) => n,
            Err(e) if is_status(&e, 404) => return Ok(()),
            Err(e) => return Err(engine("inspect network", e)),
        };
        for id in inspect.containers.unwrap_or_default().into_keys() {
            self.remove(&id).await?;
        }
        match self.docker.remove_network(name).await {
            Ok(()) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(engine("remove network", e)),
        }
    }

    /// Creates the attempt's internal network (issue 25) on a /28 of `subnet::POOL`: slot
    /// `first`, else (the engine says the subnet overlaps one of its networks) the next,
    /// at most `subnet::TRIES`; returns the slot taken. A leftover of this home under its
    /// name (a crash) is removed first by the caller: engines before API 1.44 create a
    /// second network of the same name instead of refusing one.
    async fn create_egress_network(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        first: u32,
    ) -> Result<super::subnet::Slot, RuntimeError> {
        let mut last = String::new();
        for n in 0..super::subnet::TRIES {
            let slot = super::subnet::slot(first.wrapping_add(n));
            let request = bollard::models::NetworkCreateRequest {
                name: name.to_string(),
                driver: Some("bridge".into()),
                internal: Some(true),
                // No address for the host on this bridge: `--internal` alone still lets a
                // container reach host listeners on other interfaces' addresses (the INPUT
                // chain; tests/it/egress.rs), so the host must not be on this network at all.
                options: Some(HashMap::from([(
                    "com.docker.network.bridge.inhibit_ipv4".to_string(),
                    "true".to_string(),
                )])),
                ipam: Some(bollard::models::Ipam {
                    config: Some(vec![bollard::models::IpamConfig {
                        subnet: Some(slot.subnet.clone()),
                        ip_range: Some(slot.ip_range.clone()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                labels: Some(labels.clone().into_iter().collect()),
                ..Default::default()
            };
            match self.docker.create_network(request).await {
                Ok(_) => {
                    crate::metrics::egress_network(true);
                    return Ok(slot);
                }
                Err(e) if super::subnet::is_overlap(&e.to_string()) => {
                    tracing::debug!(network = %name, subnet = %slot.subnet, "subnet taken; trying the next");
                    last = e.to_string();
                }
                Err(e) => {
                    crate::metrics::egress_network(false);
                    return Err(engine("create egress network", e));
                }
            }
        }
        crate::metrics::egress_network(false);
        Err(RuntimeError::Engine {
            op: "create egress network",
            message: format!(
                "no free /{} in {}/{} after {} tries ({last}); remove unused Docker networks there",
                super::subnet::SLOT_PREFIX,
                super::subnet::POOL,
                super::subnet::POOL_PREFIX,
                super::subnet::TRIES
            ),
        })
    }

    /// Creates the proxy container of `plan` on its network; a leftover of this home under
    /// its name (a crash) is removed and the create tried again.
    async fn create_proxy(
        &self,
        plan: &EgressPlan,
        image: String,
        address: std::net::Ipv4Addr,
    ) -> Result<String, RuntimeError> {
        let host_config = HostConfig {
            network_mode: Some(plan.network.clone()),
            extra_hosts: Some(plan.resolver_hosts.clone()),
            binds: (!plan.mounts.is_empty()).then(|| {
                plan.mounts
                    .iter()
                    .map(|(host, container)| format!("{host}:{container}:ro"))
                    .collect()
            }),
            cap_drop: Some(vec!["ALL".to_string()]),
            // Only the calls the proxy makes (`seccomp`), not the engine's default list.
            security_opt: Some(vec![
                "no-new-privileges".to_string(),
                format!("seccomp={}", super::seccomp::proxy_profile()),
            ]),
            readonly_rootfs: Some(true),
            pids_limit: Some(PROXY_PIDS),
            memory: Some(PROXY_MEMORY),
            memory_swap: Some(PROXY_MEMORY),
            nano_cpus: Some(1_000_000_000),
            log_config: Some(HostConfigLogConfig {
                typ: Some("json-file".to_string()),
                config: Some(HashMap::from([
                    ("max-size".to_string(), "16m".to_string()),
                    ("max-file".to_string(), "1".to_string()),
                ])),
            }),
            ..Default::default()
        };
        // The config in the environment, or a file the proxy waits for (`config_file`).
        let (env, cmd) = match &plan.config_file {
            Some(path) => (
                None,
                Some(vec![
                    "--config".to_string(),
                    path.clone(),
                    "--wait-for-config".to_string(),
                ]),
            ),
            None => (
                Some(vec![format!(
                    "{}={}",
                    super::PROXY_CONFIG_ENV,
                    plan.config_json
                )]),
                None,
            ),
        };
        let body = ContainerCreateBody {
            image: Some(image.clone()),
            env,
            cmd,
            labels: Some(plan.labels.clone().into_iter().collect()),
            user: Some(
                plan.user
                    .clone()
                    .unwrap_or_else(|| "65534:65534".to_string()),
            ),
            host_config: Some(host_config),
            // Its address on the attempt's network, fixed (outside the engine's range for
            // the network, `subnet`), so the agent is told it before the proxy starts.
            networking_config: Some(bollard::models::NetworkingConfig {
                endpoints_config: Some(HashMap::from([(
                    plan.network.clone(),
                    bollard::models::EndpointSettings {
                        ipam_config: Some(bollard::models::EndpointIpamConfig {
                            ipv4_address: Some(address.to_string()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                )])),
            }),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::default()
            .name(&plan.proxy_name)
            .build();
        let mut created = self
            .docker
            .create_container(Some(options.clone()), body.clone())
            .await;
        if matches!(&created, Err(e) if is_status(e, 409)) {
            self.remove(&plan.proxy_name).await?;
            created = self.docker.create_container(Some(options), body).await;
        }
        match created {
            Ok(c) => Ok(c.id),
            // The image went away while this runtime ran (`docker image prune -a`, or
            // `cleanup --images` of another binary): typed, so `made_proxy` builds it
            // again. A 404 for anything else (its network) stays the engine's error.
            Err(e) if is_status(&e, 404) && self.docker.inspect_image(&image).await.is_err() => {
                Err(RuntimeError::ImageMissing {
                    image,
                    hint: e.to_string(),
                })
            }
            Err(e) => Err(engine("create egress proxy", e)),
        }
    }

    /// The proxy's container, created and joined to its outbound network (not started).
    async fn made_proxy(
        &self,
        plan: &EgressPlan,
        address: std::net::Ipv4Addr,
    ) -> Result<String, RuntimeError> {
        let image = self.proxy_image().await?;
        let id = match self.create_proxy(plan, image, address).await {
            Err(RuntimeError::ImageMissing { image, .. }) => {
                let image = self.proxy_image_but(Some(&image)).await?;
                self.create_proxy(plan, image, address).await?
            }
            made => made?,
        };
        let connect = bollard::models::NetworkConnectRequest {
            container: id.clone(),
            endpoint_config: None,
        };
        self.docker
            .connect_network(&plan.outbound, connect)
            .await
            .map_err(|e| engine("connect the egress proxy to its outbound network", e))?;
        Ok(id)
    }

    /// Sends `signal` to the container's process.
    async fn signal(&self, id: &str, signal: &str) -> Result<(), RuntimeError> {
        let options = KillContainerOptionsBuilder::default()
            .signal(signal)
            .build();
        match self.docker.kill_container(id, Some(options)).await {
            Ok(()) => Ok(()),
            // 409: not running any more, which is what we wanted.
            Err(e) if is_status(&e, 409) => Ok(()),
            Err(e) => Err(not_found_or(id, "kill", e)),
        }
    }

    /// [`WorkerRuntime::egress_make`]: the network and the proxy's container are made at
    /// once (the engine resolves a container's network, and its fixed address there, when
    /// it starts it, so the proxy's create need not wait for its network's). The proxy is
    /// made again only when the network had to take another slot than the first.
    async fn make(&self, plan: &EgressPlan) -> Result<EgressEndpoint, RuntimeError> {
        let mut steps = Steps::start();
        // A leftover network of this home under this name (a crash), with its members.
        self.remove_network_and_members(&plan.network).await?;
        steps.mark("leftovers");
        let first = super::subnet::first_slot(&plan.network);
        let hoped = super::subnet::slot(first).proxy;
        let (made, proxy) = tokio::join!(
            async {
                let made = self
                    .create_egress_network(&plan.network, &plan.labels, first)
                    .await;
                (made, std::time::Instant::now())
            },
            async {
                let proxy = self.made_proxy(plan, hoped).await;
                (proxy, std::time::Instant::now())
            }
        );
        let ((made, net_at), (proxy, proxy_at)) = (made, proxy);
        steps.mark_at("network", net_at);
        steps.mark_at("proxy create+connect", proxy_at);
        steps.next();
        let slot = made?;
        let id = match proxy {
            Ok(id) if slot.proxy == hoped => id,
            Ok(_) => {
                tracing::debug!(proxy = %plan.proxy_name, subnet = %slot.subnet, "the network took another slot; the proxy is made again at its address");
                self.remove(&plan.proxy_name).await?;
                let id = self.made_proxy(plan, slot.proxy).await?;
                steps.mark("proxy again");
                id
            }
            // An engine that wants the network to exist at create: once more, after it.
            Err(first) => {
                tracing::debug!(proxy = %plan.proxy_name, error = %first, "egress proxy create beside its network failed; trying again after it");
                self.remove(&plan.proxy_name).await?;
                let id = self.made_proxy(plan, slot.proxy).await?;
                steps.mark("proxy again");
                id
            }
        };
        tracing::debug!(proxy = %plan.proxy_name, subnet = %slot.subnet, steps = %steps, "egress network and proxy made");
        Ok(EgressEndpoint {
            proxy_id: id,
            proxy_ip: slot.proxy.into(),
        })
    }

    /// [`WorkerRuntime::egress_start`]: starts the proxy, then waits for its `ready` (a
    /// proxy waiting for its config file: `egress_ready` does) and checks the engine gave
    /// it the address fixed for it.
    async fn start_proxy(
        &self,
        plan: &EgressPlan,
        endpoint: &EgressEndpoint,
    ) -> Result<(), RuntimeError> {
        let mut steps = Steps::start();
        let id = &endpoint.proxy_id;
        self.start(id).await?;
        steps.mark("start");
        // Ready when it says so (it binds before writing `ready`).
        let waits = plan.config_file.is_none();
        let ready = async {
            if waits {
                self.proxy_ready(id).await
            } else {
                Ok(())
            }
        };
        let address = async {
            let inspect = self
                .docker
                .inspect_container(id, None::<InspectContainerOptions>)
                .await
                .map_err(|e| engine("inspect egress proxy", e))?;
            let got: Option<std::net::IpAddr> = inspect
                .network_settings
                .and_then(|n| n.networks)
                .and_then(|mut n| n.remove(&plan.network))
                .and_then(|e| e.ip_address)
                .and_then(|ip| ip.parse().ok());
            if got == Some(endpoint.proxy_ip) {
                Ok(())
            } else {
                Err(RuntimeError::Engine {
                    op: "inspect egress proxy",
                    message: format!(
                        "the proxy is at {got:?} on {}, not at {} as asked",
                        plan.network, endpoint.proxy_ip
                    ),
                })
            }
        };
        let (ready, address) = tokio::join!(ready, address);
        ready?;
        address?;
        steps.mark(if waits { "ready+address" } else { "address" });
        tracing::debug!(proxy = %plan.proxy_name, steps = %steps, "egress proxy started");
        Ok(())
    }

    /// Follows the proxy's log until it says `ready` (at most [`PROXY_READY_TIMEOUT`]).
    async fn proxy_ready(&self, id: &str) -> Result<(), RuntimeError> {
        let ready = tokio::time::timeout(PROXY_READY_TIMEOUT, async {
            let mut logs = self.logs(id, None);
            let mut seen = Vec::new();
            while let Some(chunk) = logs.next().await {
                let chunk = chunk?;
                seen.extend_from_slice(&chunk.bytes);
                if memchr::memmem::find(&seen, br#""event":"ready""#).is_some() {
                    return Ok(());
                }
            }
            Err(RuntimeError::Engine {
                op: "start egress proxy",
                message: format!(
                    "the proxy exited before it listened: {}",
                    String::from_utf8_lossy(&seen).trim()
                ),
            })
        });
        ready.await.map_err(|_| RuntimeError::Engine {
            op: "start egress proxy",
            message: format!("the proxy did not listen within {PROXY_READY_TIMEOUT:?}"),
        })?
    }

    /// The name to create `spec` under: its own, or — when another home's container holds
    /// that name (two homes on one engine both run `local-1`) — the name with this home's
    /// label appended. Leftovers of this home under either name are removed first.
    async fn free_name(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        match self.remove_leftover(spec, &spec.name).await {
            Ok(()) => Ok(spec.name.clone()),
            Err(RuntimeError::NameTakenByOtherHome { .. }) => {
                let name = home_variant(spec);
                self.remove_leftover(spec, &name).await?;
                Ok(name)
            }
            Err(e) => Err(e),
        }
    }

    async fn remove_leftover(&self, spec: &ContainerSpec, name: &str) -> Result<(), RuntimeError> {
        let existing = match self
            .docker
            .inspect_container(name, None::<InspectContainerOptions>)
            .await
        {
            Ok(c) => c,
            Err(e) if is_status(&e, 404) => return Ok(()),
            Err(e) => return Err(engine("inspect", e)),
        };
        let theirs = existing
            .config
            .and_then(|c| c.labels)
            .and_then(|l| l.get(LABEL_HOME).cloned())
            .unwrap_or_default();
        let ours = spec.labels.get(LABEL_HOME).cloned().unwrap_or_default();
        if theirs != ours {
            return Err(RuntimeError::NameTakenByOtherHome {
                name: name.to_string(),
                other: if theirs.is_empty() {
                    "<none: not a Polyphony container>".to_string()
                } else {
                    theirs
                },
            });
        }
        tracing::warn!(container = %name, "removing a leftover container from an earlier run");
        self.remove(name).await
    }

    fn create_body(&self, spec: &ContainerSpec) -> Result<ContainerCreateBody, RuntimeError> {
        let mut env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        for var in &spec.env_from_host {
            let value =
                std::env::var(&var.from_host).map_err(|_| RuntimeError::MissingHostEnv {
                    name: var.name.clone(),
                    host_var: var.from_host.clone(),
                })?;
            env.push(format!("{}={value}", var.name));
        }
        let mounts = spec
            .mounts
            .iter()
            .map(|m| Mount {
                target: Some(m.container_path.clone()),
                source: Some(m.host_path.to_string_lossy().into_owned()),
                typ: Some(MountType::BIND),
                read_only: Some(m.read_only),
                ..Default::default()
            })
            .collect();
        let limits = &spec.limits;
        let mut security_opt = Vec::new();
        if limits.no_new_privileges {
            security_opt.push("no-new-privileges".to_string());
        }
        let host_config = HostConfig {
            mounts: Some(mounts),
            tmpfs: Some(spec.tmpfs.clone().into_iter().collect::<HashMap<_, _>>()),
            network_mode: Some(spec.network.as_docker().to_string()),
            dns: (!spec.dns.is_empty()).then(|| spec.dns.clone()),
            cap_drop: limits.cap_drop_all.then(|| vec!["ALL".to_string()]),
            security_opt: Some(security_opt),
            init: Some(limits.init),
            pids_limit: Some(limits.pids),
            memory: Some(limits.memory_bytes),
            // Swap equal to memory: an OOM is an OOM, not a slow swap storm.
            memory_swap: Some(limits.memory_bytes),
            nano_cpus: Some((limits.cpus * 1e9) as i64),
            // Only the workspace, HOME and /tmp are writable (issue 11 "resource caps").
            readonly_rootfs: Some(true),
            ulimits: Some(
                ULIMITS
                    .iter()
                    .map(|(name, value)| ResourcesUlimits {
                        name: Some(name.to_string()),
                        soft: Some(*value),
                        hard: Some(*value),
                    })
                    .collect(),
            ),
            // Explicit, whatever the engine's default driver: `logs` needs json-file, and
            // the engine's disk use per container is bounded.
            log_config: Some(HostConfigLogConfig {
                typ: Some("json-file".to_string()),
                config: Some(HashMap::from([
                    ("max-size".to_string(), LOG_MAX_SIZE.to_string()),
                    ("max-file".to_string(), "1".to_string()),
                ])),
            }),
            ..Default::default()
        };
        Ok(ContainerCreateBody {
            image: Some(spec.image.clone()),
            cmd: Some(spec.cmd.clone()),
            env: Some(env),
            working_dir: Some(spec.working_dir.clone()),
            labels: Some(spec.labels.clone().into_iter().collect()),
            user: limits.user.clone(),
            tty: Some(false),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            host_config: Some(host_config),
            ..Default::default()
        })
    }
}

/// Milliseconds per step of a proxy's start, for the daemon's debug log.
struct Steps {
    last: std::time::Instant,
    done: Vec<(&'static str, u128)>,
}

impl Steps {
    fn start() -> Steps {
        Steps {
            last: std::time::Instant::now(),
            done: Vec::new(),
        }
    }

    fn mark(&mut self, step: &'static str) {
        self.mark_at(step, std::time::Instant::now());
        self.next();
    }

    /// `step` ended at `at` (steps run at once each end at their own time, counted from
    /// the same start).
    fn mark_at(&mut self, step: &'static str, at: std::time::Instant) {
        self.done
            .push((step, at.saturating_duration_since(self.last).as_millis()));
    }

    /// Later steps count from now.
    fn next(&mut self) {
        self.last = std::time::Instant::now();
    }
}

impl std::fmt::Display for Steps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (step, ms)) in self.done.iter().enumerate() {
            write!(f, "{}{step} {ms} ms", if i == 0 { "" } else { ", " })?;
        }
        Ok(())
    }
}

/// The proxy's own limits: it forwards bytes, nothing more.
const PROXY_MEMORY: i64 = 256 * 1024 * 1024;
const PROXY_PIDS: i64 = 64;
const PROXY_READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl WorkerRuntime for DockerRuntime {
    fn create<'a>(
        &'a self,
        spec: &'a ContainerSpec,
    ) -> BoxFuture<'a, Result<String, RuntimeError>> {
        Box::pin(async move {
            let mut name = self.free_name(spec).await?;
            let (spec, staged) = staging::prepare(spec)?;
            let spec = &spec;
            let body = self.create_body(spec)?;
            let options = CreateContainerOptionsBuilder::default().name(&name).build();
            let mut created = self
                .docker
                .create_container(Some(options), body.clone())
                .await;
            // Another home created the same name between our look and our create.
            if matches!(&created, Err(e) if is_status(e, 409)) && name == spec.name {
                name = home_variant(spec);
                self.remove_leftover(spec, &name).await?;
                let options = CreateContainerOptionsBuilder::default().name(&name).build();
                created = self.docker.create_container(Some(options), body).await;
            }
            crate::metrics::container(created.is_ok());
            let created = created.map_err(|e| {
                if is_status(&e, 404) {
                    RuntimeError::ImageMissing {
                        image: spec.image.clone(),
                        hint: "build it first (see images/) or fix `container.image`".to_string(),
                    }
                } else {
                    engine("create", e)
                }
            })?;
            if let Some(staged) = staged {
                if let Ok(mut map) = self.staged.lock() {
                    map.insert(created.id.clone(), staged);
                }
            }
            Ok(created.id)
        })
    }

    fn start<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move {
            self.docker
                .start_container(id, None)
                .await
                .map_err(|e| not_found_or(id, "start", e))
        })
    }

    fn logs<'a>(
        &'a self,
        id: &'a str,
        since: Option<i64>,
    ) -> BoxStream<'a, Result<LogChunk, RuntimeError>> {
        let options = LogsOptionsBuilder::default()
            .follow(true)
            .stdout(true)
            .stderr(true)
            .since(since.unwrap_or(0).clamp(0, i32::MAX as i64) as i32)
            .build();
        self.docker
            .logs(id, Some(options))
            .map_err(move |e| not_found_or(id, "logs", e))
            .try_filter_map(|frame| async move {
                Ok(match frame {
                    LogOutput::StdOut { message } | LogOutput::Console { message } => {
                        Some(LogChunk {
                            stream: EventStream::Stdout,
                            bytes: message,
                        })
                    }
                    LogOutput::StdErr { message } => Some(LogChunk {
                        stream: EventStream::Stderr,
                        bytes: message,
                    }),
                    LogOutput::StdIn { .. } => None,
                })
            })
            .boxed()
    }

    fn wait<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<i64, RuntimeError>> {
        Box::pin(async move {
            let options = WaitContainerOptionsBuilder::default()
                .condition("not-running")
                .build();
            let mut stream = self.docker.wait_container(id, Some(options));
            match stream.next().await {
                Some(Ok(status)) => Ok(status.status_code),
                // A non-zero exit arrives as an error (NOTES-crates.md).
                Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
                    Ok(code)
                }
                Some(Err(e)) => Err(not_found_or(id, "wait", e)),
                None => {
                    let info = self.inspect(id).await?;
                    info.exit_code.ok_or_else(|| RuntimeError::Engine {
                        op: "wait",
                        message: format!("container {id} reported no exit code"),
                    })
                }
            }
        })
    }

    fn kill<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(self.signal(id, "SIGKILL"))
    }

    fn terminate<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(self.signal(id, "SIGTERM"))
    }

    fn remove<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move {
            let options = RemoveContainerOptionsBuilder::default()
                .force(true)
                .v(true)
                .build();
            let removed = self.docker.remove_container(id, Some(options)).await;
            if removed.is_ok() || matches!(&removed, Err(e) if is_status(e, 404)) {
                self.forget_staged(id);
            }
            match removed {
                Ok(()) => Ok(()),
                Err(e) if is_status(&e, 404) => Ok(()),
                // 409 "removal already in progress": someone else is doing it.
                Err(e) if is_status(&e, 409) => Ok(()),
                Err(e) => Err(engine("remove", e)),
            }
        })
    }

    fn list_by_labels<'a>(
        &'a self,
        labels: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<Vec<ContainerSummary>, RuntimeError>> {
        Box::pin(async move {
            let mut filters: HashMap<String, Vec<String>> = HashMap::new();
            filters.insert(
                "label".to_string(),
                labels.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            );
            let options = ListContainersOptionsBuilder::default()
                .all(true)
                .filters(&filters)
                .build();
            let found = self
                .docker
                .list_containers(Some(options))
                .await
                .map_err(|e| engine("list", e))?;
            Ok(found
                .into_iter()
                .map(|c| ContainerSummary {
                    id: c.id.unwrap_or_default(),
                    name: c
                        .names
                        .and_then(|n| n.into_iter().next())
                        .map(|n| n.trim_start_matches('/').to_string())
                        .unwrap_or_default(),
                    state: summary_state(c.state.map(|s| s.to_string()).as_deref()),
                    labels: c
                        .labels
                        .map(|l| l.into_iter().collect())
                        .unwrap_or_default(),
                })
                .collect())
        })
    }

    fn egress_up<'a>(
        &'a self,
        plan: &'a EgressPlan,
    ) -> BoxFuture<'a, Result<EgressEndpoint, RuntimeError>> {
        Box::pin(async move {
            let endpoint = self.egress_make(plan).await?;
            self.egress_start(plan, &endpoint).await?;
            Ok(endpoint)
        })
    }

    fn egress_make<'a>(
        &'a self,
        plan: &'a EgressPlan,
    ) -> BoxFuture<'a, Result<EgressEndpoint, RuntimeError>> {
        Box::pin(async move {
            match self.make(plan).await {
                Ok(endpoint) => Ok(endpoint),
                Err(e) => {
                    let _ = self.remove(&plan.proxy_name).await;
                    let _ = self.remove_network_and_members(&plan.network).await;
                    Err(e)
                }
            }
        })
    }

    fn egress_start<'a>(
        &'a self,
        plan: &'a EgressPlan,
        endpoint: &'a EgressEndpoint,
    ) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move {
            match self.start_proxy(plan, endpoint).await {
                Ok(()) => Ok(()),
                Err(e) => {
                    let _ = self.remove(&plan.proxy_name).await;
                    let _ = self.remove_network_and_members(&plan.network).await;
                    Err(e)
                }
            }
        })
    }

    fn holds<'a>(&'a self, image: &'a str) -> BoxFuture<'a, Result<bool, RuntimeError>> {
        Box::pin(async move {
            if let Some(known) = self.holds.lock().ok().and_then(|h| h.get(image).copied()) {
                return Ok(known);
            }
            let inspect = match self.docker.inspect_image(image).await {
                Ok(i) => i,
                // The create says what is missing, and how to fix it.
                Err(e) if is_status(&e, 404) => return Ok(false),
                Err(e) => return Err(engine("inspect image", e)),
            };
            let holds = inspect
                .config
                .and_then(|c| c.labels)
                .and_then(|l| l.get(super::container_spec::HOLD_LABEL).cloned())
                .is_some_and(|v| v.trim() == "1");
            if let Ok(mut known) = self.holds.lock() {
                known.insert(image.to_string(), holds);
            }
            Ok(holds)
        })
    }

    fn release<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move {
            let mine = self
                .staged
                .lock()
                .ok()
                .and_then(|s| s.get(id).map(|st| st.path().to_path_buf()));
            // Another process's container (a re-attached attempt): its staging mount.
            let root = match mine {
                Some(root) => root,
                None => {
                    let info = self.inspect(id).await?;
                    let root = info
                        .mounts
                        .iter()
                        .find(|(target, _)| target == super::container_spec::STAGING_ROOT)
                        .map(|(_, source)| std::path::PathBuf::from(source));
                    root.ok_or_else(|| {
                        RuntimeError::Io(format!(
                            "container {id} has no staging directory to be released through"
                        ))
                    })?
                }
            };
            staging::release(&root).map_err(|e| {
                RuntimeError::Io(format!(
                    "cannot release container {id} ({}): {e}",
                    root.display()
                ))
            })
        })
    }

    fn egress_ready<'a>(&'a self, proxy: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move { self.proxy_ready(proxy).await })
    }

    fn egress_stop<'a>(&'a self, proxy: &'a str) -> BoxFuture<'a, Result<Vec<u8>, RuntimeError>> {
        Box::pin(async move {
            let mut steps = Steps::start();
            // SIGKILL (the proxy needs no graceful stop: it holds nothing to flush), not
            // awaited: the engine answers a kill only once it released the proxy's two
            // network endpoints (about 130 ms on 20.10), while the log ends as soon as
            // the process is gone (about 50 ms). The log is read to its end meanwhile;
            // `egress_remove`'s forced removal waits for the rest.
            let rt = self.clone();
            let name = proxy.to_string();
            let mut kill = tokio::spawn(async move { rt.kill(&name).await });
            let mut killed = false;
            let mut out = Vec::new();
            let mut logs = self.logs(proxy, None);
            loop {
                let chunk = tokio::select! {
                    answered = &mut kill, if !killed => {
                        killed = true;
                        steps.mark("kill answered");
                        match answered {
                            Ok(Ok(()) | Err(RuntimeError::NotFound(_))) => continue,
                            Ok(Err(e)) => return Err(e),
                            Err(e) => return Err(RuntimeError::Engine { op: "kill", message: e.to_string() }),
                        }
                    }
                    chunk = logs.next() => chunk,
                };
                match chunk {
                    None => break,
                    Some(Ok(c)) if c.stream == EventStream::Stdout => {
                        out.extend_from_slice(&c.bytes)
                    }
                    Some(Ok(_)) => {}
                    Some(Err(RuntimeError::NotFound(_))) => break,
                    Some(Err(e)) => return Err(e),
                }
            }
            steps.mark("log read to its end");
            tracing::debug!(%proxy, steps = %steps, "egress proxy stopped");
            Ok(out)
        })
    }

    fn egress_remove<'a>(
        &'a self,
        proxy: &'a str,
        network: &'a str,
    ) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move {
            let mut steps = Steps::start();
            self.remove(proxy).await?;
            steps.mark("remove proxy");
            self.remove_network_and_members(network).await?;
            steps.mark("remove network");
            tracing::debug!(%proxy, %network, steps = %steps, "egress proxy and network removed");
            Ok(())
        })
    }

    fn list_networks<'a>(
        &'a self,
        labels: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<Vec<NetworkSummary>, RuntimeError>> {
        Box::pin(async move {
            let filters: HashMap<String, Vec<String>> = HashMap::from([(
                "label".to_string(),
                labels.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            )]);
            let options = bollard::query_parameters::ListNetworksOptions {
                filters: Some(filters),
            };
            let found = self
                .docker
                .list_networks(Some(options))
                .await
                .map_err(|e| engine("list networks", e))?;
            Ok(found
                .into_iter()
                .map(|n| NetworkSummary {
                    name: n.name.unwrap_or_default(),
                    labels: n.labels.unwrap_or_default().into_iter().collect(),
                })
                .collect())
        })
    }

    fn remove_network<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        Box::pin(async move { self.remove_network_and_members(name).await })
    }

    fn host_address<'a>(
        &'a self,
        network: &'a crate::domain::NetworkMode,
    ) -> BoxFuture<'a, Result<Option<std::net::IpAddr>, RuntimeError>> {
        use crate::domain::NetworkMode;
        Box::pin(async move {
            let name = match network {
                NetworkMode::None => return Ok(None),
                NetworkMode::Host => return Ok(Some(std::net::Ipv4Addr::LOCALHOST.into())),
                NetworkMode::Bridge => "bridge",
                NetworkMode::Named(n) => n.as_str(),
            };
            let inspect = self
                .docker
                .inspect_network(name, None)
                .await
                .map_err(|e| engine("inspect network", e))?;
            let gateways: Vec<String> = inspect
                .ipam
                .and_then(|i| i.config)
                .into_iter()
                .flatten()
                .filter_map(|c| c.gateway)
                .collect();
            let bridge = inspect
                .options
                .and_then(|o| o.get("com.docker.network.bridge.name").cloned());
            Ok(bridge_address(&gateways, bridge.as_deref(), interface_ipv4))
        })
    }

    fn inspect<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<ContainerInfo, RuntimeError>> {
        Box::pin(async move {
            let c = self
                .docker
                .inspect_container(id, None::<InspectContainerOptions>)
                .await
                .map_err(|e| not_found_or(id, "inspect", e))?;
            let state = c.state.unwrap_or_default();
            let host = c.host_config.unwrap_or_default();
            let config = c.config.unwrap_or_default();
            Ok(ContainerInfo {
                id: c.id.unwrap_or_default(),
                name: c
                    .name
                    .map(|n| n.trim_start_matches('/').to_string())
                    .unwrap_or_default(),
                state: summary_state(state.status.map(|s| s.to_string()).as_deref()),
                exit_code: state.exit_code,
                oom_killed: state.oom_killed.unwrap_or(false),
                started_at: parse_time(state.started_at.as_deref()),
                finished_at: parse_time(state.finished_at.as_deref()),
                labels: config
                    .labels
                    .map(|l| l.into_iter().collect::<BTreeMap<_, _>>())
                    .unwrap_or_default(),
                cap_drop: host.cap_drop.unwrap_or_default(),
                security_opt: host.security_opt.unwrap_or_default(),
                pids_limit: host.pids_limit,
                memory_bytes: host.memory,
                nano_cpus: host.nano_cpus,
                init: host.init,
                user: config.user.filter(|u| !u.is_empty()),
                network_mode: host.network_mode,
                readonly_rootfs: host.readonly_rootfs.unwrap_or(false),
                ulimits: host
                    .ulimits
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|u| Some((u.name?, u.soft?, u.hard?)))
                    .collect(),
                log_config: host
                    .log_config
                    .map(|l| {
                        let mut out: BTreeMap<String, String> =
                            l.config.unwrap_or_default().into_iter().collect();
                        out.insert("type".into(), l.typ.unwrap_or_default());
                        out
                    })
                    .unwrap_or_default(),
                tmpfs: host
                    .tmpfs
                    .map(|t| t.into_iter().collect())
                    .unwrap_or_default(),
                mounts: c
                    .mounts
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|m| Some((m.destination?, m.source.unwrap_or_default())))
                    .collect(),
            })
        })
    }
}

fn summary_state(status: Option<&str>) -> RunState {
    match status {
        Some("created") => RunState::Created,
        Some("running") => RunState::Running,
        Some("exited") => RunState::Exited,
        _ => RunState::Other,
    }
}

/// Docker reports "never" as year 1.
fn parse_time(raw: Option<&str>) -> Option<DateTime<Utc>> {
    let t = DateTime::parse_from_rfc3339(raw?).ok()?.with_timezone(&Utc);
    (t.timestamp() > 0).then_some(t)
}

fn is_status(e: &bollard::errors::Error, code: u16) -> bool {
    matches!(e, bollard::errors::Error::DockerResponseServerError { status_code, .. } if *status_code == code)
}

fn engine(op: &'static str, e: bollard::errors::Error) -> RuntimeError {
    RuntimeError::Engine {
        op,
        message: e.to_string(),
    }
}

fn not_found_or(id: &str, op: &'static str, e: bollard::errors::Error) -> RuntimeError {
    if is_status(&e, 404) {
        RuntimeError::NotFound(id.to_string())
    } else {
        engine(op, e)
    }
}

/// `spec.name` with this home's label appended, for when another home holds the name.
fn home_variant(spec: &ContainerSpec) -> String {
    let home = spec
        .labels
        .get(LABEL_HOME)
        .map(String::as_str)
        .unwrap_or("");
    format!("{}-{}", spec.name, &home[..home.len().min(8)])
}

/// A connection failure, with a permission problem on the socket told apart (it needs a
/// different fix than an engine that is not running).
fn connect_error(e: bollard::errors::Error) -> RuntimeError {
    let text = e.to_string();
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    let mut denied = text.to_ascii_lowercase().contains("permission denied")
        || matches!(&e, bollard::errors::Error::IOError { err } if err.kind() == std::io::ErrorKind::PermissionDenied);
    while let Some(err) = source {
        if err
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
        {
            denied = true;
        }
        source = err.source();
    }
    if denied {
        let socket = std::env::var("DOCKER_HOST")
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "unix:///var/run/docker.sock".into());
        return RuntimeError::PermissionDenied { socket };
    }
    RuntimeError::Connect(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 12: a socket the user may not open read "cannot reach the engine".
    #[test]
    fn permission_denied_names_the_socket_and_the_fix() {
        let denied = bollard::errors::Error::IOError {
            err: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        let text = connect_error(denied).to_string();
        assert!(
            text.contains("permission denied on the Docker socket"),
            "{text}"
        );
        assert!(
            text.contains("docker` group") && text.contains("DOCKER_HOST"),
            "{text}"
        );
        let refused = bollard::errors::Error::IOError {
            err: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        };
        assert!(matches!(connect_error(refused), RuntimeError::Connect(_)));
    }
}

/// The host's address on a bridge network (pure but for `interface`): its IPAM gateway when
/// the engine reports one; else (Docker 20.10 reports none for the default `bridge`: its
/// IPAM config holds only the subnet) the IPv4 address of the network's host interface
/// (`com.docker.network.bridge.name`, e.g. `docker0`), as `interface` finds it.
pub fn bridge_address(
    gateways: &[String],
    bridge: Option<&str>,
    interface: impl Fn(&str) -> Option<std::net::IpAddr>,
) -> Option<std::net::IpAddr> {
    gateways
        .iter()
        .find_map(|g| g.parse().ok())
        .or_else(|| bridge.and_then(interface))
}

/// The first IPv4 address of the host interface `name` (`getifaddrs`), if it has one.
fn interface_ipv4(name: &str) -> Option<std::net::IpAddr> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list freed by freeifaddrs below; every
    // pointer read is checked for null and read only while the list lives.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return None;
        }
        let mut found = None;
        let mut at = list;
        while !at.is_null() {
            let entry = &*at;
            at = entry.ifa_next;
            if entry.ifa_addr.is_null() || entry.ifa_name.is_null() {
                continue;
            }
            if std::ffi::CStr::from_ptr(entry.ifa_name).to_bytes() != name.as_bytes() {
                continue;
            }
            if i32::from((*entry.ifa_addr).sa_family) == libc::AF_INET {
                let sin = &*(entry.ifa_addr as *const libc::sockaddr_in);
                found = Some(std::net::IpAddr::V4(std::net::Ipv4Addr::from(
                    u32::from_be(sin.sin_addr.s_addr),
                )));
                break;
            }
        }
        libc::freeifaddrs(list);
        found
    }
}

#[cfg(test)]
mod bridge_tests {
    use super::*;

    #[test]
    fn the_ipam_gateway_wins_else_the_bridge_interfaces_address() {
        let docker0 = |name: &str| (name == "docker0").then(|| "172.17.0.1".parse().unwrap());
        // Docker 20.10's default bridge: only a subnet in its IPAM config.
        assert_eq!(
            bridge_address(&[], Some("docker0"), docker0),
            Some("172.17.0.1".parse().unwrap())
        );
        assert_eq!(
            bridge_address(&["10.1.0.1".into()], Some("docker0"), docker0),
            Some("10.1.0.1".parse().unwrap())
        );
        assert_eq!(bridge_address(&[], None, docker0), None);
        assert_eq!(bridge_address(&[], Some("br-x"), docker0), None);
        // Loopback is an interface every host has.
        assert_eq!(interface_ipv4("lo"), Some("127.0.0.1".parse().unwrap()));
        assert_eq!(interface_ipv4("polyphony-no-such-if"), None);
    }
}
