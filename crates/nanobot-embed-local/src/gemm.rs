//! The one matrix product of the encoder, safe to call: `c = alpha · a · b + beta · c` over
//! strided views of slices, every extent checked against its slice before matrixmultiply's
//! raw-pointer `sgemm` (SIMD kernels chosen at run time) is called. The only `unsafe` of
//! the crate.
#![allow(unsafe_code)]

/// A `rows × cols` view of a slice starting at `offset`, element (i, j) at
/// `offset + i * row_stride + j * col_stride`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View {
    pub(crate) offset: usize,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) row_stride: usize,
    pub(crate) col_stride: usize,
}

impl View {
    /// A dense row-major matrix at `offset`.
    pub(crate) fn rows(offset: usize, rows: usize, cols: usize, row_stride: usize) -> View {
        View {
            offset,
            rows,
            cols,
            row_stride,
            col_stride: 1,
        }
    }

    /// The same elements read transposed.
    pub(crate) fn transposed(self) -> View {
        View {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    /// One past the last element it reaches (its offset when empty).
    fn end(&self) -> usize {
        if self.rows == 0 || self.cols == 0 {
            return self.offset;
        }
        self.offset + (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride + 1
    }
}

/// `c = alpha · a · b + beta · c`. Panics (a bug, never data) if the shapes disagree or a
/// view reaches past its slice; `c` must not overlap itself (row stride ≥ columns).
#[allow(clippy::panic, clippy::too_many_arguments)]
pub(crate) fn gemm(
    alpha: f32,
    a: (&[f32], View),
    b: (&[f32], View),
    beta: f32,
    c: (&mut [f32], View),
) {
    let ((a, va), (b, vb), (c, vc)) = (a, b, c);
    if va.cols != vb.rows || va.rows != vc.rows || vb.cols != vc.cols {
        panic!("gemm: shapes {va:?} · {vb:?} into {vc:?}");
    }
    if va.end() > a.len() || vb.end() > b.len() || vc.end() > c.len() {
        panic!("gemm: a view reaches past its slice");
    }
    if vc.rows > 1
        && vc.cols > 1
        && vc.row_stride < vc.cols * vc.col_stride
        && vc.col_stride < vc.rows * vc.row_stride
    {
        panic!("gemm: the output overlaps itself");
    }
    if va.rows == 0 || vb.cols == 0 {
        return;
    }
    let stride = |s: usize| s as isize;
    // SAFETY: every element the three views reach lies inside its slice (checked above),
    // `c` is borrowed mutably and so overlaps neither input, and its elements are distinct.
    unsafe {
        matrixmultiply::sgemm(
            va.rows,
            va.cols,
            vb.cols,
            alpha,
            a.as_ptr().add(va.offset),
            stride(va.row_stride),
            stride(va.col_stride),
            b.as_ptr().add(vb.offset),
            stride(vb.row_stride),
            stride(vb.col_stride),
            beta,
            c.as_mut_ptr().add(vc.offset),
            stride(vc.row_stride),
            stride(vc.col_stride),
        );
    }
}
