//! ZLink mesh transport on libzmq.
