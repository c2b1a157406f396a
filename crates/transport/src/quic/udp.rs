//! UDP sockets for QUIC endpoints: bound with the requested buffer sizes (forced past the
//! system's caps where the process may), several on one address with `SO_REUSEPORT`, and what
//! the kernel granted read back.
//!
//! This module owns the sockets' set-up; it must not build quinn's configuration.

use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

use crate::settings::{QuicSettings, SocketBuffers};

impl QuicSettings {
    /// Binds a UDP socket at `addr` with the requested buffer sizes.
    ///
    /// SO_RCVBUF/SO_SNDBUF are capped by `net.core.rmem_max`/`wmem_max`; when the kernel
    /// grants less than asked and the process may (CAP_NET_ADMIN), the `...FORCE` variants are
    /// tried. What was granted is returned so that it can be reported.
    pub fn bind_udp(
        &self,
        addr: SocketAddr,
    ) -> std::io::Result<(std::net::UdpSocket, SocketBuffers)> {
        self.bind_udp_socket(addr, false)
    }

    /// `count` UDP sockets bound to one address with `SO_REUSEPORT` (the first binds `addr`,
    /// port 0 included; the others its actual address), each set up as
    /// [`bind_udp`](QuicSettings::bind_udp) does. A `count` of 0 or 1 is one socket without
    /// `SO_REUSEPORT`. See [`QuicSettings::server_endpoints`].
    ///
    /// ```
    /// use agentwire_transport::QuicSettings;
    /// let sockets = QuicSettings::default().bind_udp_group("127.0.0.1:0".parse()?, 2)?;
    /// assert_eq!(sockets.len(), 2);
    /// assert_eq!(sockets[0].0.local_addr()?, sockets[1].0.local_addr()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn bind_udp_group(
        &self,
        addr: SocketAddr,
        count: usize,
    ) -> std::io::Result<Vec<(std::net::UdpSocket, SocketBuffers)>> {
        if count <= 1 {
            return Ok(vec![self.bind_udp(addr)?]);
        }
        let first = self.bind_udp_socket(addr, true)?;
        let bound = first.0.local_addr()?;
        let mut sockets = vec![first];
        for _ in 1..count {
            sockets.push(self.bind_udp_socket(bound, true)?);
        }
        Ok(sockets)
    }

    fn bind_udp_socket(
        &self,
        addr: SocketAddr,
        reuse_port: bool,
    ) -> std::io::Result<(std::net::UdpSocket, SocketBuffers)> {
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        if addr.is_ipv6() {
            // Accept v4-mapped peers too where the address is the unspecified one.
            let _ = socket.set_only_v6(false);
        }
        if reuse_port {
            socket.set_reuse_port(true)?;
        }
        set_buffer(&socket, self.socket_recv_buffer, BufferKind::Recv);
        set_buffer(&socket, self.socket_send_buffer, BufferKind::Send);
        socket.bind(&addr.into())?;
        socket.set_nonblocking(true)?;
        let buffers = SocketBuffers {
            send: socket.send_buffer_size().unwrap_or(0),
            recv: socket.recv_buffer_size().unwrap_or(0),
        };
        Ok((socket.into(), buffers))
    }
}

#[derive(Clone, Copy)]
enum BufferKind {
    Send,
    Recv,
}

fn set_buffer(socket: &Socket, want: usize, kind: BufferKind) {
    if want == 0 {
        return;
    }
    let granted = match kind {
        BufferKind::Send => socket
            .set_send_buffer_size(want)
            .and_then(|()| socket.send_buffer_size()),
        BufferKind::Recv => socket
            .set_recv_buffer_size(want)
            .and_then(|()| socket.recv_buffer_size()),
    };
    // Linux doubles the value it stores; less than `want` back means the cap applied.
    if granted.unwrap_or(0) < want {
        force_buffer(socket, want, kind);
    }
}

#[cfg(target_os = "linux")]
fn force_buffer(socket: &Socket, want: usize, kind: BufferKind) {
    use std::os::fd::AsRawFd;
    let opt = match kind {
        BufferKind::Send => libc::SO_SNDBUFFORCE,
        BufferKind::Recv => libc::SO_RCVBUFFORCE,
    };
    let value = libc::c_int::try_from(want).unwrap_or(libc::c_int::MAX);
    // SAFETY: setsockopt with a valid fd, a valid option and a pointer to a c_int of the
    // length passed; failure (no CAP_NET_ADMIN) is reported by the return value only.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!(
            want,
            "could not force the UDP socket buffer size (no CAP_NET_ADMIN?)"
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn force_buffer(_socket: &Socket, _want: usize, _kind: BufferKind) {}
