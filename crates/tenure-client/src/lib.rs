//! tenure-client
pub mod proto {
    tonic::include_proto!("tenure.v1");
}
