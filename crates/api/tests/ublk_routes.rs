//! `POST` and `DELETE /v1/vds/{name}/ublk`: routed with their bodies checked, other methods
//! refused, and a controller without a ublk front end answering `unavailable`.

use std::sync::Arc;

use tessera_api::testing::FakeController;
use tessera_api::{ExportUblk, Router};

fn error_code(body: &[u8]) -> String {
    let value: serde_json::Value = serde_json::from_slice(body).expect("a JSON error");
    value["error"]["code"].as_str().expect("a code").to_string()
}

#[test]
fn ublk_export_routes() {
    let router = Router::new(Arc::new(FakeController::new()));

    // The fake controller has no ublk front end: the default methods answer `unavailable`.
    for (method, body) in [
        ("POST", ""),
        ("POST", r#"{"queues": 2, "queue_depth": 64}"#),
        ("DELETE", ""),
    ] {
        let answer = router.handle(method, "/v1/vds/vd0/ublk", body.as_bytes());
        assert_eq!(answer.status, 503, "{method} {body}");
        assert_eq!(error_code(&answer.body), "unavailable");
    }

    let answer = router.handle("POST", "/v1/vds/vd0/ublk", br#"{"queue": 2}"#);
    assert_eq!(answer.status, 400, "a misspelt setting is refused");
    assert_eq!(error_code(&answer.body), "invalid_argument");

    let answer = router.handle("GET", "/v1/vds/vd0/ublk", b"");
    assert_eq!(answer.status, 405);
    assert_eq!(answer.allow, Some("POST, DELETE"));

    let answer = router.handle("POST", "/v1/vds/bad%2Fname/ublk", b"");
    assert_eq!(answer.status, 400, "names are checked");

    let read_only = Router::read_only(Arc::new(FakeController::new()));
    assert_eq!(
        read_only.handle("POST", "/v1/vds/vd0/ublk", b"").status,
        404
    );

    let body: ExportUblk = serde_json::from_str("{}").unwrap();
    assert_eq!(body, ExportUblk::default());
}
