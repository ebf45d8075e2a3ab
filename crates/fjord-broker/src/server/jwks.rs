//! A listener's JWKS when an identity provider serves it over HTTP(S), as Kafka's refreshing
//! resolver keeps it: fetched at start (no signed token is taken before the first fetch
//! succeeds), again every `refresh_ms`, and sooner when a token names a key the set does not hold
//! — a rotated key — at most once per backoff, which doubles from `retry_backoff_ms` up to
//! `retry_backoff_max_ms` while such fetches go on (so tokens naming made-up keys cannot make
//! the broker hammer the provider). A failed fetch keeps the keys held and is tried again after
//! the backoff. A JWKS file is read here too, bounded as an answer is.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fjord_config::HttpJwks;
use fjord_sasl::jwks::VerificationKeys;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::header::{HOST, USER_AGENT};
use hyper::{Request, Uri};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The largest JWKS document read.
const MAX_JWKS_BYTES: usize = 1 << 20;
/// How long one fetch may take, connecting included.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the keys are asked whether a token named one they do not hold.
const MISS_CHECK: Duration = Duration::from_millis(50);

/// Keeps `keys` as `endpoint` serves them (`tls`: for an `https:` URL), for `listener`.
pub(crate) fn follow(
    endpoint: HttpJwks,
    tls: Option<Arc<rustls::ClientConfig>>,
    keys: Arc<VerificationKeys>,
    listener: String,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let millis = |ms: i64| Duration::from_millis(u64::try_from(ms).unwrap_or(0));
        let base = millis(endpoint.retry_backoff_ms).max(Duration::from_millis(1));
        let longest = millis(endpoint.retry_backoff_max_ms).max(base);
        let refresh = millis(endpoint.refresh_ms).max(base);
        let (mut backoff, mut next, mut last) = (base, Instant::now(), Instant::now());
        let (mut fetched_once, mut for_missing_key) = (false, false);
        loop {
            if fetched_once && keys.take_missed() && last + backoff < next {
                next = last + backoff;
                for_missing_key = true;
            }
            if Instant::now() >= next {
                last = Instant::now();
                match fetch(&endpoint.url, tls.clone()).await {
                    Ok(fetched) => {
                        keys.replace(fetched);
                        if !fetched_once {
                            tracing::info!(%listener, url = %endpoint.url, "JWKS fetched");
                        }
                        fetched_once = true;
                        next = Instant::now() + refresh;
                        // A fetch for a missing key makes the next such fetch wait longer.
                        backoff = match for_missing_key {
                            true => (backoff * 2).min(longest),
                            false => base,
                        };
                    }
                    Err(error) => {
                        tracing::warn!(%listener, url = %endpoint.url, %error, "cannot fetch the JWKS");
                        next = Instant::now() + backoff;
                        backoff = (backoff * 2).min(longest);
                    }
                }
                for_missing_key = false;
            }
            let until_next = next.saturating_duration_since(Instant::now());
            tokio::time::sleep(until_next.min(MISS_CHECK)).await;
        }
    })
}

/// A JWKS file, refused if larger than an identity provider's answer may be.
pub(crate) fn read_file(path: &std::path::Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut document = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_JWKS_BYTES as u64 + 1).read_to_end(&mut document))
        .map_err(|e| e.to_string())?;
    if document.len() > MAX_JWKS_BYTES {
        return Err(format!("larger than {MAX_JWKS_BYTES} bytes"));
    }
    Ok(document)
}

/// The signing keys `url` serves now.
async fn fetch(
    url: &str,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> Result<VerificationKeys, String> {
    let document = tokio::time::timeout(FETCH_TIMEOUT, get(url, tls))
        .await
        .map_err(|_| format!("no answer within {FETCH_TIMEOUT:?}"))??;
    VerificationKeys::from_jwks(&document)
}

/// The body of a GET of `url`, over TLS when `tls` is given.
async fn get(url: &str, tls: Option<Arc<rustls::ClientConfig>>) -> Result<Bytes, String> {
    let uri: Uri = url.parse().map_err(|e| format!("not a URL: {e}"))?;
    let authority = uri.authority().ok_or("the URL names no host")?.clone();
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = authority
        .port_u16()
        .unwrap_or(if tls.is_some() { 443 } else { 80 });
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let request = Request::get(path)
        .header(HOST, authority.as_str())
        .header(USER_AGENT, "fjord")
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let stream = TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    match tls {
        None => send(stream, request).await,
        Some(config) => {
            let name = rustls::pki_types::ServerName::try_from(host.to_string())
                .map_err(|e| format!("{host}: {e}"))?;
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await
                .map_err(|e| format!("TLS: {e}"))?;
            send(stream, request).await
        }
    }
}

/// Sends `request` on `io` (HTTP/1.1) and reads a successful answer's body, bounded.
async fn send<T>(io: T, request: Request<Empty<Bytes>>) -> Result<Bytes, String>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    let connection = tokio::spawn(connection);
    let answer = async {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("HTTP: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("answered {}", response.status()));
        }
        Limited::new(response.into_body(), MAX_JWKS_BYTES)
            .collect()
            .await
            .map(|body| body.to_bytes())
            .map_err(|e| format!("reading the answer: {e}"))
    }
    .await;
    connection.abort();
    answer
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A server answering each connection's request with `answers[i]` (the last one after
    /// that), counting the requests.
    async fn server(answers: Vec<String>) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
        let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = served.clone();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let n = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let answer = answers[n.min(answers.len() - 1)].clone();
                tokio::spawn(async move {
                    let mut request = vec![0; 4096];
                    let _ = stream.read(&mut request).await;
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        (url, served)
    }

    fn ok(body: &str) -> String {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    }

    fn endpoint(url: &str) -> HttpJwks {
        HttpJwks {
            url: url.to_string(),
            refresh_ms: 3_600_000,
            retry_backoff_ms: 10,
            retry_backoff_max_ms: 40,
            tls: None,
        }
    }

    const JWKS: &str = r#"{"keys":[{"kty":"EC","crv":"P-256","kid":"k","x":"PqBnEUl0amZURjPw-ZWSMkxtVRfU195WtwmXhFZZA0U","y":"FsFktOWgoLIDgJFOVKtQHzuVztfeDTj_4wEr0HMLz88"}]}"#;

    #[tokio::test]
    async fn a_jwks_is_fetched_and_an_error_or_an_oversized_answer_is_refused() {
        let (url, _) = server(vec![ok(JWKS)]).await;
        assert!(fetch(&url, None).await.is_ok());
        let (url, _) = server(vec![
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".into()
        ])
        .await;
        let refused = fetch(&url, None).await.err().unwrap_or_default();
        assert!(refused.contains("404"), "{refused}");
        let (url, _) = server(vec![ok(&" ".repeat(MAX_JWKS_BYTES + 1))]).await;
        assert!(fetch(&url, None).await.is_err());
        let (url, _) = server(vec![ok("{}")]).await;
        assert!(fetch(&url, None).await.is_err());
    }

    #[tokio::test]
    async fn a_failed_fetch_is_tried_again_and_a_missing_key_fetches_sooner() {
        let refused = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n".to_string();
        let (url, served) = server(vec![refused, ok(JWKS)]).await;
        let keys = Arc::new(VerificationKeys::default());
        let task = follow(endpoint(&url), None, keys.clone(), "L".into());
        let count = || served.load(std::sync::atomic::Ordering::SeqCst);
        tokio::time::timeout(Duration::from_secs(5), async {
            while count() < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
        // A token naming a key not held: fetched again, though the refresh is an hour away.
        let token_header = serde_json::json!({"alg": "ES256", "kid": "rotated"});
        let settled = count();
        assert!(!keys.verify("a.b.c", token_header.as_object().unwrap()));
        tokio::time::timeout(Duration::from_secs(5), async {
            while count() == settled {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
        task.abort();
    }
}
