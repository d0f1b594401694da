//! Location Store (spec SB-2, EG-14).
