//! The mirror's requests to the local cluster, through kube's typed
//! [`Api`]: create, server-side apply, merge-patch repair, get, delete with
//! preconditions, and the NotOwned Event through kube's event
//! [`Recorder`]. ServiceImports, a CRD, go through `Api<DynamicObject>` with
//! the resource discovery found ([`discover_mcs`]), the typed object
//! converted at the served version ([`crate::k8s::crd`]); so does the
//! status of the local ServiceExports, the only write to an object that is
//! not ours (its `/status` subresource, by server-side apply under our
//! field manager, so nothing else of it is touched).
//!
//! Owns how each request is made (field manager, `force`, preconditions)
//! and turns every answer into a typed [`Object`] or an [`ApiError`] that
//! keeps the HTTP status. It must not decide what a status means: that is
//! the controller's policy (`mirror::run`).

use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Desired, FIELD_MANAGER, Kind, MANAGED_BY, MANAGED_BY_LABEL, Object, ObjectRef};
use crate::k8s::crd::{self, CrdError, ServiceExport};
use crate::vocab::mcs::{MCS_GROUP, MCS_VERSIONS};

/// `reportingController` of our Events.
pub(crate) const REPORTING_CONTROLLER: &str = "clusterset-dns-mirror";

/// Why a request did not give an object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ApiError {
    /// The API answered with this status (409, 404, 422...).
    #[error("{code} {reason}: {message}")]
    Status {
        /// HTTP status code.
        code: u16,
        /// The Status reason (`AlreadyExists`, `Conflict`...).
        reason: String,
        /// The Status message.
        message: String,
    },
    /// No answer: connection, TLS, timeout, an undecodable response.
    #[error("{0}")]
    Failed(String),
    /// A ServiceImport or ServiceExport did not convert between its typed
    /// form and the served version's dynamic one: ours (a bug of ours), or
    /// the API's answer.
    #[error("object does not encode as its kind: {0}")]
    Encode(String),
}

impl ApiError {
    /// The HTTP status, when the API answered.
    pub(crate) fn code(&self) -> Option<u16> {
        match self {
            Self::Status { code, .. } => Some(*code),
            Self::Failed(_) | Self::Encode(_) => None,
        }
    }
}

impl From<kube::Error> for ApiError {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) => Self::Status {
                code: s.code,
                reason: s.reason,
                message: s.message,
            },
            e => Self::Failed(e.to_string()),
        }
    }
}

/// The two built-in kinds we write.
trait Mirrored:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
{
}

impl Mirrored for Service {}
impl Mirrored for EndpointSlice {}

fn encode_error(e: CrdError) -> ApiError {
    ApiError::Encode(e.to_string())
}

fn api<K: Mirrored>(client: &Client, key: &ObjectRef) -> Api<K> {
    Api::namespaced(client.clone(), &key.namespace)
}

fn post_params() -> PostParams {
    PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    }
}

/// Which patch: the body is the typed object either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    /// Server-side apply.
    Apply,
    /// JSON merge patch.
    Merge,
}

impl How {
    fn patch<T: Serialize>(self, body: &T) -> Patch<&T> {
        match self {
            Self::Apply => Patch::Apply(body),
            Self::Merge => Patch::Merge(body),
        }
    }
}

async fn patch_as<K: Mirrored>(
    client: &Client,
    key: &ObjectRef,
    params: &PatchParams,
    patch: &Patch<&K>,
) -> Result<K, ApiError> {
    Ok(api::<K>(client, key)
        .patch(&key.name, params, patch)
        .await?)
}

async fn delete_as<K: Mirrored>(
    client: &Client,
    key: &ObjectRef,
    params: &DeleteParams,
) -> Result<(), ApiError> {
    // Either the object (deletion pending) or a Status: both mean accepted.
    api::<K>(client, key).delete(&key.name, params).await?;
    Ok(())
}

/// The MCS API resources the local cluster serves, as discovery found
/// them: each at `v1beta1`, else `v1alpha1` (the same schema).
#[derive(Debug, Clone, Default)]
pub(crate) struct McsApis {
    /// `serviceimports`, if served.
    pub import: Option<ApiResource>,
    /// `serviceexports`, if served.
    pub export: Option<ApiResource>,
}

/// Finds the local cluster's ServiceImport and ServiceExport resources
/// ([`crate::k8s::discover`]). A group that is not served finds neither.
pub(crate) async fn discover_mcs(client: &Client) -> Result<McsApis, ApiError> {
    use crate::k8s::discover;
    let group = discover::group(client, MCS_GROUP)
        .await
        .map_err(|e| ApiError::Failed(e.to_string()))?;
    let Some(group) = group else {
        return Ok(McsApis::default());
    };
    Ok(McsApis {
        import: discover::resource(&group, &MCS_VERSIONS, "ServiceImport"),
        export: discover::resource(&group, &MCS_VERSIONS, "ServiceExport"),
    })
}

fn dynamic(
    client: &Client,
    ar: Option<&ApiResource>,
    ns: &str,
) -> Result<Api<DynamicObject>, ApiError> {
    let ar =
        ar.ok_or_else(|| ApiError::Failed("the cluster does not serve ServiceImports".to_owned()))?;
    Ok(Api::namespaced_with(client.clone(), ns, ar))
}

/// The local cluster as the mirror writes it.
#[derive(Clone)]
pub(crate) struct LocalApi {
    client: Client,
    recorder: Recorder,
    /// The ServiceImport resource (`None`: not served, or `--mcs` off).
    imports: Option<ApiResource>,
}

impl Debug for LocalApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // kube's Client and Recorder have no Debug.
        f.debug_struct("LocalApi").finish_non_exhaustive()
    }
}

impl LocalApi {
    /// Requests with `client`; Events name `instance` (the Lease identity)
    /// as their reporting instance.
    pub(crate) fn new(client: Client, instance: &str) -> Self {
        let reporter = Reporter {
            controller: REPORTING_CONTROLLER.to_owned(),
            instance: Some(instance.to_owned()),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            imports: None,
        }
    }

    /// ServiceImports are written as `ar` (what [`discover_mcs`] found).
    pub(crate) fn set_imports(&mut self, ar: Option<ApiResource>) {
        self.imports = ar;
    }

    fn imports(&self, key: &ObjectRef) -> Result<Api<DynamicObject>, ApiError> {
        dynamic(&self.client, self.imports.as_ref(), &key.namespace)
    }

    /// A ServiceImport the API returned, typed, at the version served.
    fn import_of(&self, o: DynamicObject) -> Result<Object, ApiError> {
        let version = self.imports.as_ref().map_or("", |ar| ar.version.as_str());
        Ok(Object::ServiceImport {
            version: Arc::from(version),
            import: crd::from_dynamic(o).map_err(encode_error)?,
        })
    }

    /// POST: fails with 409 if a same-named object exists, so nobody's
    /// object is ever taken over.
    pub(crate) async fn create(&self, d: &Desired) -> Result<Object, ApiError> {
        let params = post_params();
        let key = &d.key;
        Ok(match &d.object {
            Object::Service(s) => Object::Service(Box::new(
                api::<Service>(&self.client, key).create(&params, s).await?,
            )),
            Object::EndpointSlice(s) => Object::EndpointSlice(
                api::<EndpointSlice>(&self.client, key)
                    .create(&params, s)
                    .await?,
            ),
            Object::ServiceImport { version, import } => {
                let body = crd::to_dynamic(import, version).map_err(encode_error)?;
                self.import_of(self.imports(key)?.create(&params, &body).await?)?
            }
        })
    }

    /// Server-side apply of the whole desired object as [`FIELD_MANAGER`],
    /// forced: the fields we own are ours even if someone else set them.
    pub(crate) async fn apply(&self, d: &Desired) -> Result<Object, ApiError> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.patch(&d.key, &params, How::Apply, &d.object).await
    }

    /// Merge patch: replaces the lists in `body` whole, which apply cannot
    /// do for list entries another manager owns.
    pub(crate) async fn merge(&self, key: &ObjectRef, body: &Object) -> Result<Object, ApiError> {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        self.patch(key, &params, How::Merge, body).await
    }

    async fn patch(
        &self,
        key: &ObjectRef,
        params: &PatchParams,
        how: How,
        body: &Object,
    ) -> Result<Object, ApiError> {
        let client = &self.client;
        Ok(match body {
            Object::Service(s) => Object::Service(Box::new(
                patch_as(client, key, params, &how.patch(&**s)).await?,
            )),
            Object::EndpointSlice(s) => {
                Object::EndpointSlice(patch_as(client, key, params, &how.patch(s)).await?)
            }
            Object::ServiceImport { version, import } => {
                let body = crd::to_dynamic(import, version).map_err(encode_error)?;
                let api = self.imports(key)?;
                self.import_of(api.patch(&key.name, params, &how.patch(&body)).await?)?
            }
        })
    }

    /// The object as it is now.
    pub(crate) async fn get(&self, key: &ObjectRef) -> Result<Object, ApiError> {
        Ok(match key.kind {
            Kind::Service => Object::Service(Box::new(
                api::<Service>(&self.client, key).get(&key.name).await?,
            )),
            Kind::EndpointSlice => Object::EndpointSlice(
                api::<EndpointSlice>(&self.client, key)
                    .get(&key.name)
                    .await?,
            ),
            Kind::ServiceImport => self.import_of(self.imports(key)?.get(&key.name).await?)?,
        })
    }

    /// Deletes the object only if it is still the one we listed: the API
    /// answers 409 when its uid or resourceVersion differs.
    pub(crate) async fn delete(
        &self,
        key: &ObjectRef,
        uid: Option<String>,
        resource_version: Option<String>,
    ) -> Result<(), ApiError> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid,
                resource_version,
            }),
            ..DeleteParams::default()
        };
        match key.kind {
            Kind::Service => delete_as::<Service>(&self.client, key, &params).await,
            Kind::EndpointSlice => delete_as::<EndpointSlice>(&self.client, key, &params).await,
            Kind::ServiceImport => {
                // Either the object (deletion pending) or a Status.
                self.imports(key)?.delete(&key.name, &params).await?;
                Ok(())
            }
        }
    }

    /// Server-side apply of `body` (name, namespace and
    /// `status.conditions` only) to the `/status` of the local
    /// ServiceExport `namespace/name`, resource `ar`, as [`FIELD_MANAGER`]:
    /// only the conditions we own change.
    pub(crate) async fn apply_export_status(
        &self,
        ar: &ApiResource,
        namespace: &str,
        name: &str,
        body: &ServiceExport,
    ) -> Result<ServiceExport, ApiError> {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), namespace, ar);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let body = crd::to_dynamic(body, &ar.version).map_err(encode_error)?;
        let answer = api
            .patch_status(name, &params, &Patch::Apply(&body))
            .await?;
        crd::from_dynamic(answer).map_err(encode_error)
    }

    /// A Warning Event (`events.k8s.io/v1`, reason `NotOwned`) on the
    /// same-named object we leave alone.
    pub(crate) async fn not_owned(
        &self,
        key: &ObjectRef,
        uid: Option<String>,
    ) -> Result<(), ApiError> {
        let api_version = match key.kind {
            Kind::Service => "v1",
            Kind::EndpointSlice => "discovery.k8s.io/v1",
            Kind::ServiceImport => self
                .imports
                .as_ref()
                .map_or("multicluster.x-k8s.io/v1beta1", |ar| {
                    ar.api_version.as_str()
                }),
        };
        let regarding = ObjectReference {
            api_version: Some(api_version.to_owned()),
            kind: Some(key.kind.as_str().to_owned()),
            namespace: Some(key.namespace.to_string()),
            name: Some(key.name.to_string()),
            uid,
            ..ObjectReference::default()
        };
        let event = Event {
            type_: EventType::Warning,
            reason: "NotOwned".to_owned(),
            note: Some(format!(
                "clusterset-dns wants to mirror into {key} but a same-named object without the label {MANAGED_BY_LABEL}={MANAGED_BY} exists; it is left alone"
            )),
            action: "Mirror".to_owned(),
            secondary: None,
        };
        self.recorder.publish(&event, &regarding).await?;
        Ok(())
    }
}
