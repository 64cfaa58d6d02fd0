// Trains a small classifier on Fashion-MNIST with TensorFlow.js, then predicts
// the test set: a Ringmaster `train` job for the tfjs image (node 18, tfjs
// 4.22 in /opt/tfjs/node_modules on NODE_PATH). Runs on the WebAssembly
// backend, or on the plain JS cpu backend when wasm does not start.
//
//   node train_predict.js [--data-dir data] [--train-n 6000] [--test-n 1000]
//                         [--epochs 3] [--batch-size 64] [--out outputs] [--backend wasm|cpu]
//
// Data: the IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte,
// t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, gzipped or not) that the job
// stages into --data-dir; without them it says so and trains on synthetic data.
// Prints `epoch N loss X acc Y` per epoch and `test_accuracy Z` at the end;
// appends JSON lines ({"kind","step","epoch","loss","accuracy"}) to
// $RINGMASTER_METRICS_FILE when set; writes --out/predictions.csv
// (index,label,predicted) and --out/model.json + model.weights.bin (the
// tfjs layers format: tf.loadLayersModel reads them). --out defaults to
// $RINGMASTER_OUTPUT_DIR, else "outputs". A 784-128-10 MLP: tfjs 4.22's wasm
// backend has no convolution gradients. About 8 s on one core (wasm; 37 s on
// cpu), 0.83-0.84 test accuracy with the defaults.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
let tf;
try {
  tf = require('@tensorflow/tfjs');
} catch (e) {
  console.error('train_predict: @tensorflow/tfjs not found: run it in the tfjs image, or put its node_modules on NODE_PATH');
  process.exit(1);
}

function parseArgs(argv) {
  const o = {
    dataDir: 'data', trainN: 6000, testN: 1000, epochs: 3, batchSize: 64,
    out: process.env.RINGMASTER_OUTPUT_DIR || 'outputs', backend: 'wasm',
  };
  const keys = {'--data-dir': 'dataDir', '--train-n': 'trainN', '--test-n': 'testN', '--epochs': 'epochs',
                '--batch-size': 'batchSize', '--out': 'out', '--backend': 'backend'};
  for (let i = 2; i < argv.length; i += 2) {
    const key = keys[argv[i]];
    if (!key || i + 1 >= argv.length) throw new Error(`usage: unknown or incomplete option ${argv[i]}`);
    o[key] = typeof o[key] === 'number' ? Number(argv[i + 1]) : argv[i + 1];
    if (typeof o[key] === 'number' && !(Number.isInteger(o[key]) && o[key] > 0)) {
      throw new Error(`${argv[i]} wants a positive integer, not ${argv[i + 1]}`);
    }
  }
  return o;
}

// readIdx(dir, name): the file's bytes, gunzipped; null when neither name nor name.gz exists.
function readIdx(dir, name) {
  for (const f of [name, name + '.gz']) {
    const p = path.join(dir, f);
    if (!fs.existsSync(p)) continue;
    const raw = fs.readFileSync(p);
    return raw[0] === 0x1f && raw[1] === 0x8b ? zlib.gunzipSync(raw) : raw;
  }
  return null;
}

// IDX: big-endian magic (2051 images: n, rows, cols; 2049 labels: n), then uint8s.
function parseImages(buf, limit, file) {
  if (buf.readUInt32BE(0) !== 2051) throw new Error(`${file}: not an IDX image file`);
  const n = Math.min(buf.readUInt32BE(4), limit), px = buf.readUInt32BE(8) * buf.readUInt32BE(12);
  const x = new Float32Array(n * px);
  for (let i = 0; i < n * px; i++) x[i] = buf[16 + i] / 255;
  return {x, n, px};
}
function parseLabels(buf, limit, file) {
  if (buf.readUInt32BE(0) !== 2049) throw new Error(`${file}: not an IDX label file`);
  const n = Math.min(buf.readUInt32BE(4), limit);
  return Int32Array.from(buf.subarray(8, 8 + n));
}

function loadSplit(dir, prefix, limit) {
  const img = readIdx(dir, `${prefix}-images-idx3-ubyte`), lab = readIdx(dir, `${prefix}-labels-idx1-ubyte`);
  if (!img || !lab) return null;
  const {x, n, px} = parseImages(img, limit, `${prefix}-images`);
  const y = parseLabels(lab, limit, `${prefix}-labels`);
  if (y.length !== n) throw new Error(`${prefix}: ${n} images but ${y.length} labels`);
  return {x, y, n, px};
}

// Ten Gaussian blobs in 784 dimensions, seeded: something to learn without the dataset.
function synthetic(n, seed) {
  let s = seed >>> 0;
  const rand = () => ((s = (s * 1664525 + 1013904223) >>> 0) / 4294967296);
  const gauss = () => Math.sqrt(-2 * Math.log(rand() + 1e-12)) * Math.cos(2 * Math.PI * rand());
  const px = 784, centers = Array.from({length: 10}, (_, c) => Float32Array.from({length: px}, (_, j) => ((c * 7 + j) % 11) / 10));
  const x = new Float32Array(n * px), y = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    y[i] = Math.floor(rand() * 10);
    for (let j = 0; j < px; j++) x[i * px + j] = centers[y[i]][j] + 0.5 * gauss();
  }
  return {x, y, n, px};
}

async function pickBackend(wanted) {
  if (wanted === 'wasm') {
    try {
      require('@tensorflow/tfjs-backend-wasm');
      if (await tf.setBackend('wasm')) {
        await tf.ready();
        return 'wasm';
      }
      console.log('backend: wasm did not start: falling back to cpu');
    } catch (e) {
      console.log(`backend: wasm failed (${e.message}): falling back to cpu`);
    }
  }
  await tf.setBackend('cpu');
  await tf.ready();
  return 'cpu';
}

function appendMetrics(record) {
  const file = process.env.RINGMASTER_METRICS_FILE;
  if (file) fs.appendFileSync(file, JSON.stringify(record) + '\n');
}

// Saves in the layers format that tf.loadLayersModel reads (what file:// does in tfjs-node).
function saveHandler(dir) {
  return tf.io.withSaveHandler(async (artifacts) => {
    fs.writeFileSync(path.join(dir, 'model.weights.bin'), Buffer.from(artifacts.weightData));
    fs.writeFileSync(path.join(dir, 'model.json'), JSON.stringify({
      format: 'layers-model', generatedBy: `TensorFlow.js tfjs-layers v${tf.version.tfjs}`, convertedBy: null,
      modelTopology: artifacts.modelTopology,
      weightsManifest: [{paths: ['model.weights.bin'], weights: artifacts.weightSpecs}],
    }));
    return {modelArtifactsInfo: {dateSaved: new Date(), modelTopologyType: 'JSON'}};
  });
}

async function main() {
  const o = parseArgs(process.argv);
  const t0 = Date.now();
  const backend = await pickBackend(o.backend);
  console.log(`tfjs ${tf.version.tfjs} on node ${process.version}, backend ${backend}`);

  let train = loadSplit(o.dataDir, 'train', o.trainN), test = loadSplit(o.dataDir, 't10k', o.testN);
  if (!train || !test) {
    console.log(`no Fashion-MNIST IDX files in ${o.dataDir}: training on synthetic data`);
    train = synthetic(o.trainN, 1);
    test = synthetic(o.testN, 2);
  }
  console.log(`train ${train.n} test ${test.n} samples of ${train.px} pixels`);

  const xTrain = tf.tensor2d(train.x, [train.n, train.px]);
  const yTrain = tf.oneHot(tf.tensor1d(train.y, 'int32'), 10);
  const xTest = tf.tensor2d(test.x, [test.n, test.px]);

  const model = tf.sequential();
  model.add(tf.layers.dense({units: 128, activation: 'relu', inputShape: [train.px],
                             kernelInitializer: tf.initializers.glorotUniform({seed: 1})}));
  model.add(tf.layers.dense({units: 10, activation: 'softmax',
                             kernelInitializer: tf.initializers.glorotUniform({seed: 2})}));
  model.compile({optimizer: tf.train.adam(0.002), loss: 'categoricalCrossentropy', metrics: ['accuracy']});

  const stepsPerEpoch = Math.ceil(train.n / o.batchSize);
  const t1 = Date.now();
  await model.fit(xTrain, yTrain, {
    epochs: o.epochs, batchSize: o.batchSize, shuffle: true, verbose: 0,
    callbacks: {onEpochEnd: async (epoch, logs) => {
      const acc = logs.acc !== undefined ? logs.acc : logs.accuracy;
      console.log(`epoch ${epoch + 1} loss ${logs.loss.toFixed(4)} acc ${acc.toFixed(4)}`);
      appendMetrics({kind: 'epoch', step: (epoch + 1) * stepsPerEpoch, epoch: epoch + 1, loss: logs.loss, accuracy: acc});
    }},
  });
  const trainS = (Date.now() - t1) / 1000;

  const predicted = tf.tidy(() => model.predict(xTest).argMax(-1)).dataSync();
  let correct = 0;
  const rows = ['index,label,predicted'];
  for (let i = 0; i < test.n; i++) {
    if (predicted[i] === test.y[i]) correct++;
    rows.push(`${i},${test.y[i]},${predicted[i]}`);
  }
  const accuracy = correct / test.n;
  fs.mkdirSync(o.out, {recursive: true});
  fs.writeFileSync(path.join(o.out, 'predictions.csv'), rows.join('\n') + '\n');
  await model.save(saveHandler(o.out));
  console.log(`test_accuracy ${accuracy.toFixed(4)}`);
  console.log(`train ${trainS.toFixed(1)} s, total ${((Date.now() - t0) / 1000).toFixed(1)} s; ` +
              `predictions and model in ${o.out}`);
  appendMetrics({kind: 'final', step: o.epochs * stepsPerEpoch, accuracy,
                 predictions: path.join(o.out, 'predictions.csv')});
}

main().catch((e) => {
  console.error(`train_predict: ${e && e.message ? e.message : e}`);
  process.exit(1);
});
