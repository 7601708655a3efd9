//! A BERT encoder's forward pass in f32, as the reference server computes it: embeddings,
//! then per layer self-attention and a GELU feed-forward block, each followed by a residual
//! and layer norm; the tokens of every text of a batch side by side (no padding: the dense
//! products run over all of them at once, attention within each text).

use crate::EmbedError;
use crate::gemm::{View, gemm};
use crate::safetensors::Tensors;

/// The shape of the model (`config.json`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) hidden: usize,
    pub(crate) heads: usize,
    pub(crate) layers: usize,
    pub(crate) intermediate: usize,
    pub(crate) positions: usize,
    pub(crate) vocab: usize,
    pub(crate) eps: f32,
}

struct Layer {
    /// Query, key and value weights side by side: `[3 * hidden, hidden]`, as PyTorch
    /// stores a linear layer (out, in).
    qkv: Vec<f32>,
    qkv_bias: Vec<f32>,
    attention_out: Vec<f32>,
    attention_out_bias: Vec<f32>,
    attention_norm: (Vec<f32>, Vec<f32>),
    intermediate: Vec<f32>,
    intermediate_bias: Vec<f32>,
    output: Vec<f32>,
    output_bias: Vec<f32>,
    output_norm: (Vec<f32>, Vec<f32>),
}

/// The weights.
pub(crate) struct Bert {
    shape: Shape,
    words: Vec<f32>,
    positions: Vec<f32>,
    token_type: Vec<f32>,
    embedding_norm: (Vec<f32>, Vec<f32>),
    layers: Vec<Layer>,
}

impl Bert {
    /// Takes the weights of `shape` out of `tensors`.
    pub(crate) fn new(shape: Shape, tensors: &mut Tensors) -> Result<Bert, EmbedError> {
        let h = shape.hidden;
        let mut norm = |name: &str| -> Result<(Vec<f32>, Vec<f32>), EmbedError> {
            Ok((
                tensors.take(&format!("{name}.weight"), &[h])?,
                tensors.take(&format!("{name}.bias"), &[h])?,
            ))
        };
        let embedding_norm = norm("embeddings.LayerNorm")?;
        let token_types = tensors.take("embeddings.token_type_embeddings.weight", &[2, h]);
        let token_type = match token_types {
            Ok(types) => types[..h].to_vec(),
            Err(_) => tensors.take("embeddings.token_type_embeddings.weight", &[1, h])?,
        };
        let mut bert = Bert {
            shape,
            words: tensors.take("embeddings.word_embeddings.weight", &[shape.vocab, h])?,
            positions: tensors.take(
                "embeddings.position_embeddings.weight",
                &[shape.positions, h],
            )?,
            token_type,
            embedding_norm,
            layers: Vec::new(),
        };
        for i in 0..shape.layers {
            bert.layers
                .push(Layer::new(shape, tensors, &format!("encoder.layer.{i}."))?);
        }
        Ok(bert)
    }

    /// The mean-pooled, unit-length vector of each text's token ids.
    pub(crate) fn embed(&self, texts: &[Vec<u32>]) -> Vec<Vec<f32>> {
        let h = self.shape.hidden;
        let mut x = self.embeddings(texts);
        let total = x.len() / h;
        let mut scratch = Scratch::new(total, self.shape);
        for layer in &self.layers {
            layer.forward(&mut x, texts, self.shape, &mut scratch);
        }
        let mut out = Vec::with_capacity(texts.len());
        let mut row = 0;
        for ids in texts {
            let mut pooled = vec![0.0f32; h];
            for t in row..row + ids.len() {
                for (p, v) in pooled.iter_mut().zip(&x[t * h..(t + 1) * h]) {
                    *p += v;
                }
            }
            row += ids.len();
            let n = ids.len().max(1) as f32;
            pooled.iter_mut().for_each(|p| *p /= n);
            let norm = pooled.iter().map(|v| v * v).sum::<f32>().sqrt();
            if norm > 0.0 {
                pooled.iter_mut().for_each(|p| *p /= norm);
            }
            out.push(pooled);
        }
        out
    }

    fn embeddings(&self, texts: &[Vec<u32>]) -> Vec<f32> {
        let h = self.shape.hidden;
        let mut x = Vec::with_capacity(texts.iter().map(Vec::len).sum::<usize>() * h);
        for ids in texts {
            for (position, &id) in ids.iter().enumerate() {
                let word = &self.words[id as usize * h..(id as usize + 1) * h];
                let place = &self.positions[position * h..(position + 1) * h];
                x.extend((0..h).map(|i| word[i] + place[i] + self.token_type[i]));
            }
        }
        layer_norm(&mut x, &self.embedding_norm, self.shape.eps);
        x
    }
}

/// Buffers reused by every layer of one batch.
struct Scratch {
    qkv: Vec<f32>,
    context: Vec<f32>,
    projected: Vec<f32>,
    inner: Vec<f32>,
    scores: Vec<f32>,
}

impl Scratch {
    fn new(tokens: usize, shape: Shape) -> Scratch {
        Scratch {
            qkv: vec![0.0; tokens * 3 * shape.hidden],
            context: vec![0.0; tokens * shape.hidden],
            projected: vec![0.0; tokens * shape.hidden],
            inner: vec![0.0; tokens * shape.intermediate],
            scores: Vec::new(),
        }
    }
}

impl Layer {
    fn new(shape: Shape, tensors: &mut Tensors, p: &str) -> Result<Layer, EmbedError> {
        let (h, i) = (shape.hidden, shape.intermediate);
        let mut take = |name: &str, dims: &[usize]| tensors.take(&format!("{p}{name}"), dims);
        let mut qkv = take("attention.self.query.weight", &[h, h])?;
        qkv.extend(take("attention.self.key.weight", &[h, h])?);
        qkv.extend(take("attention.self.value.weight", &[h, h])?);
        let mut qkv_bias = take("attention.self.query.bias", &[h])?;
        qkv_bias.extend(take("attention.self.key.bias", &[h])?);
        qkv_bias.extend(take("attention.self.value.bias", &[h])?);
        Ok(Layer {
            qkv,
            qkv_bias,
            attention_out: take("attention.output.dense.weight", &[h, h])?,
            attention_out_bias: take("attention.output.dense.bias", &[h])?,
            attention_norm: (
                take("attention.output.LayerNorm.weight", &[h])?,
                take("attention.output.LayerNorm.bias", &[h])?,
            ),
            intermediate: take("intermediate.dense.weight", &[i, h])?,
            intermediate_bias: take("intermediate.dense.bias", &[i])?,
            output: take("output.dense.weight", &[h, i])?,
            output_bias: take("output.dense.bias", &[h])?,
            output_norm: (
                take("output.LayerNorm.weight", &[h])?,
                take("output.LayerNorm.bias", &[h])?,
            ),
        })
    }

    fn forward(&self, x: &mut [f32], texts: &[Vec<u32>], shape: Shape, s: &mut Scratch) {
        let (h, im) = (shape.hidden, shape.intermediate);
        let tokens = x.len() / h;
        linear(x, tokens, h, &self.qkv, &self.qkv_bias, 3 * h, &mut s.qkv);
        attention(&s.qkv, texts, shape, &mut s.scores, &mut s.context);
        linear(
            &s.context,
            tokens,
            h,
            &self.attention_out,
            &self.attention_out_bias,
            h,
            &mut s.projected,
        );
        add_and_norm(x, &s.projected, &self.attention_norm, shape.eps);
        linear(
            x,
            tokens,
            h,
            &self.intermediate,
            &self.intermediate_bias,
            im,
            &mut s.inner,
        );
        s.inner.iter_mut().for_each(|v| *v = gelu(*v));
        linear(
            &s.inner,
            tokens,
            im,
            &self.output,
            &self.output_bias,
            h,
            &mut s.projected,
        );
        add_and_norm(x, &s.projected, &self.output_norm, shape.eps);
    }
}

/// `out[rows, outputs] = input[rows, inputs] · weight[outputs, inputs]ᵀ + bias`.
fn linear(
    input: &[f32],
    rows: usize,
    inputs: usize,
    weight: &[f32],
    bias: &[f32],
    outputs: usize,
    out: &mut [f32],
) {
    for row in out.chunks_exact_mut(outputs).take(rows) {
        row.copy_from_slice(bias);
    }
    gemm(
        1.0,
        (input, View::rows(0, rows, inputs, inputs)),
        (weight, View::rows(0, outputs, inputs, inputs).transposed()),
        1.0,
        (out, View::rows(0, rows, outputs, outputs)),
    );
}

/// Multi-head self-attention of each text over its own tokens.
fn attention(
    qkv: &[f32],
    texts: &[Vec<u32>],
    shape: Shape,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let h = shape.hidden;
    let size = h / shape.heads;
    let stride = 3 * h;
    let scale = 1.0 / (size as f32).sqrt();
    let mut start = 0;
    for ids in texts {
        let n = ids.len();
        scores.resize(n * n, 0.0);
        for head in 0..shape.heads {
            let q = start * stride + head * size;
            let k = q + h;
            let v = q + 2 * h;
            gemm(
                scale,
                (qkv, View::rows(q, n, size, stride)),
                (qkv, View::rows(k, n, size, stride).transposed()),
                0.0,
                (scores, View::rows(0, n, n, n)),
            );
            for row in scores.chunks_exact_mut(n) {
                softmax(row);
            }
            gemm(
                1.0,
                (scores, View::rows(0, n, n, n)),
                (qkv, View::rows(v, n, size, stride)),
                0.0,
                (out, View::rows(start * h + head * size, n, size, h)),
            );
        }
        start += n;
    }
}

fn softmax(row: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in row.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    row.iter_mut().for_each(|v| *v /= sum);
}

fn add_and_norm(x: &mut [f32], added: &[f32], norm: &(Vec<f32>, Vec<f32>), eps: f32) {
    x.iter_mut().zip(added).for_each(|(a, b)| *a += b);
    layer_norm(x, norm, eps);
}

fn layer_norm(x: &mut [f32], (weight, bias): &(Vec<f32>, Vec<f32>), eps: f32) {
    let h = weight.len();
    for row in x.chunks_exact_mut(h) {
        let mean = row.iter().sum::<f32>() / h as f32;
        let variance = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / h as f32;
        let scale = 1.0 / (variance + eps).sqrt();
        for ((v, w), b) in row.iter_mut().zip(weight).zip(bias) {
            *v = (*v - mean) * scale * w + b;
        }
    }
}

/// BERT's exact GELU, x·Φ(x), with erf by Abramowitz and Stegun 7.1.26 (error under
/// 1.5e-7), as the reference server computes it.
fn gelu(x: f32) -> f32 {
    let z = x / std::f32::consts::SQRT_2;
    let sign = z.signum();
    let a = z.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = ((((1.061_405_4 * t - 1.453_152_1) * t) + 1.421_413_7) * t - 0.284_496_74) * t
        + 0.254_829_6;
    let erf = sign * (1.0 - poly * t * (-a * a).exp());
    0.5 * x * (1.0 + erf)
}
