//! ZLink wire format: typed records, the frame layout and a strict codec. No IO, no tokio, no ZeroMQ.
