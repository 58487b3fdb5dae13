//! The `Host` and `Origin` header checks (DNS-rebinding protection): a web page on an attacker's domain
//! that resolves to this server's address must not be able to talk to it from a browser.
//!
//! rmcp applies the check to `/mcp` itself; this module applies the same rule, with the same
//! list, in front of both `/mcp` and `/metrics`, and gives rmcp that list. The matching follows rmcp's:
//! hosts compare case-insensitively without IPv6 brackets, and an allowed entry without a port
//! accepts any port.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, Uri, header, uri::Authority};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The hosts accepted when no `--allowed-host` is given: loopback names only.
pub const DEFAULT_ALLOWED_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// One accepted `host[:port]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostPort {
    host: String,
    port: Option<u16>,
}

impl HostPort {
    fn new(host: &str, port: Option<u16>) -> HostPort {
        HostPort {
            host: host
                .trim_matches(|c| c == '[' || c == ']')
                .to_ascii_lowercase(),
            port,
        }
    }

    fn parse(entry: &str) -> Option<HostPort> {
        let entry = entry.trim();
        if entry.is_empty() {
            return None;
        }
        Some(match Authority::try_from(entry) {
            Ok(authority) => HostPort::new(authority.host(), authority.port_u16()),
            Err(_) => HostPort::new(entry, None),
        })
    }
}

/// The `Host` values a server accepts.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    /// As configured, for rmcp's own check on `/mcp`.
    entries: Vec<String>,
    parsed: Vec<HostPort>,
}

impl AllowedHosts {
    /// `configured`, or the loopback names when it is empty.
    pub fn new(configured: &[String]) -> AllowedHosts {
        let entries: Vec<String> = if configured.is_empty() {
            DEFAULT_ALLOWED_HOSTS
                .iter()
                .map(|h| h.to_string())
                .collect()
        } else {
            configured.to_vec()
        };
        let parsed = entries.iter().filter_map(|e| HostPort::parse(e)).collect();
        AllowedHosts { entries, parsed }
    }

    /// The list as configured (never empty).
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// `Ok` when the request names an allowed host; otherwise the status and message to send:
    /// `400` for a missing or malformed `Host`, `403` for a foreign one (as rmcp answers on
    /// `/mcp`).
    fn check(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), (StatusCode, &'static str)> {
        let presented = match headers.get(header::HOST) {
            Some(value) => {
                let authority = value
                    .to_str()
                    .ok()
                    .and_then(|text| Authority::try_from(text).ok())
                    .ok_or((
                        StatusCode::BAD_REQUEST,
                        "Bad Request: Invalid Host header\n",
                    ))?;
                HostPort::new(authority.host(), authority.port_u16())
            }
            // HTTP/2 carries the host in `:authority` instead.
            None => uri
                .authority()
                .map(|authority| HostPort::new(authority.host(), authority.port_u16()))
                .ok_or((
                    StatusCode::BAD_REQUEST,
                    "Bad Request: missing Host header\n",
                ))?,
        };
        if self.admits(&presented) {
            return self.check_origin(headers);
        }
        tracing::warn!(host = %presented.host, "refused a request with a Host header that is not allowed (possible DNS rebinding); add it with --allowed-host if it is yours");
        Err((
            StatusCode::FORBIDDEN,
            "Forbidden: Host header is not allowed\n",
        ))
    }
}

impl AllowedHosts {
    fn admits(&self, presented: &HostPort) -> bool {
        self.parsed.iter().any(|allowed| {
            allowed.host == presented.host && allowed.port.is_none_or(|p| presented.port == Some(p))
        })
    }

    /// A browser names the page that sent a request in `Origin`: absent (not a browser, or a
    /// same-origin `GET`) passes; present, it must be `http` or `https` on an allowed host,
    /// as the MCP specification requires against DNS rebinding. `null` (a sandboxed frame,
    /// a `file:` page) is refused.
    fn check_origin(&self, headers: &HeaderMap) -> Result<(), (StatusCode, &'static str)> {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let presented = origin
            .to_str()
            .ok()
            .and_then(|text| Uri::try_from(text).ok())
            .and_then(|uri| {
                let default_port = match uri.scheme_str()? {
                    "http" => 80,
                    "https" => 443,
                    _ => return None,
                };
                let authority = uri.authority()?;
                Some(HostPort::new(
                    authority.host(),
                    Some(authority.port_u16().unwrap_or(default_port)),
                ))
            });
        match presented {
            Some(presented) if self.admits(&presented) => Ok(()),
            _ => {
                tracing::warn!(origin = ?origin, "refused a request from a web page whose Origin is not allowed (possible DNS rebinding); add its host with --allowed-host if it is yours");
                Err((StatusCode::FORBIDDEN, "Forbidden: Origin is not allowed\n"))
            }
        }
    }
}

/// Middleware: lets a request through only when its `Host` is allowed, and its `Origin`,
/// when it has one.
pub async fn require_allowed_host(
    State(hosts): State<std::sync::Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    match hosts.check(request.uri(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn status(hosts: &AllowedHosts, host: Option<&str>) -> Option<StatusCode> {
        let mut headers = HeaderMap::new();
        if let Some(host) = host {
            headers.insert(header::HOST, HeaderValue::from_str(host).ok()?);
        }
        hosts
            .check(&Uri::from_static("/metrics"), &headers)
            .err()
            .map(|(status, _)| status)
    }

    #[test]
    fn loopback_names_are_the_default_and_any_port_is_accepted() {
        let hosts = AllowedHosts::new(&[]);
        assert_eq!(hosts.entries(), DEFAULT_ALLOWED_HOSTS);
        for ok in [
            "localhost",
            "LOCALHOST:8848",
            "127.0.0.1:1",
            "[::1]:80",
            "[::1]",
        ] {
            assert_eq!(status(&hosts, Some(ok)), None, "{ok}");
        }
        for foreign in [
            "evil.example",
            "evil.example:8848",
            "127.0.0.2",
            "localhost.evil",
        ] {
            assert_eq!(
                status(&hosts, Some(foreign)),
                Some(StatusCode::FORBIDDEN),
                "{foreign}"
            );
        }
        assert_eq!(status(&hosts, None), Some(StatusCode::BAD_REQUEST));
        assert_eq!(status(&hosts, Some("a b")), Some(StatusCode::BAD_REQUEST));
    }

    fn origin_status(hosts: &AllowedHosts, origin: &str) -> Option<StatusCode> {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8848"));
        headers.insert(header::ORIGIN, HeaderValue::from_str(origin).ok()?);
        hosts
            .check(&Uri::from_static("/mcp"), &headers)
            .err()
            .map(|(status, _)| status)
    }

    #[test]
    fn an_origin_must_name_an_allowed_host_over_http_or_https() {
        let hosts = AllowedHosts::new(&[]);
        for ok in [
            "http://127.0.0.1:8848",
            "https://localhost",
            "http://[::1]:9",
        ] {
            assert_eq!(origin_status(&hosts, ok), None, "{ok}");
        }
        for foreign in [
            "http://evil.example",
            "http://evil.example:8848",
            "null",
            "file://",
            "ftp://127.0.0.1",
            "127.0.0.1:8848",
        ] {
            assert_eq!(
                origin_status(&hosts, foreign),
                Some(StatusCode::FORBIDDEN),
                "{foreign}"
            );
        }
        let edge = AllowedHosts::new(&["127.0.0.1".into(), "edge.example:443".into()]);
        assert_eq!(origin_status(&edge, "https://edge.example"), None);
        assert_eq!(
            origin_status(&edge, "http://edge.example"),
            Some(StatusCode::FORBIDDEN)
        );
    }

    #[test]
    fn configured_hosts_replace_the_default_and_a_port_must_match_when_given() {
        let hosts = AllowedHosts::new(&["locks.internal".into(), "Edge.Example:443".into()]);
        assert_eq!(status(&hosts, Some("locks.internal:8848")), None);
        assert_eq!(status(&hosts, Some("edge.example:443")), None);
        assert_eq!(
            status(&hosts, Some("edge.example:8443")),
            Some(StatusCode::FORBIDDEN)
        );
        assert_eq!(
            status(&hosts, Some("localhost")),
            Some(StatusCode::FORBIDDEN)
        );
    }
}
