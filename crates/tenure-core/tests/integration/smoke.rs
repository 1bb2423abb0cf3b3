use std::time::Duration;
use tenure_core::testkit::Cluster;

#[test]
fn bootstrap_regenerates_every_store() {
    let mut c = Cluster::new(5, 16);
    c.run_for(Duration::from_secs(5));
    for s in 0..16 {
        let m = c.manager_of(tenure_core::StoreId(s));
        assert!(m.is_some(), "store {s} has no manager");
    }
    assert!(c.all_managed());
    eprintln!("obs {}", c.observations.len());
}
