// Driver for benchmarks/bench_lab_vs_java.py (dpstream's own code, not the benchmark's).
// Runs the nine w-event mechanisms of streamdp-benchmark's artificial experiments
// (FAST_w, Uniform, Sample, BD, BA, RescueDP, PeGaSus, DSAT, AdaPub) RUNS times each
// on one dpstream counts file (header "timestep,b0,...", one row per timestep),
// at window W and budget EPS, computing MAE and ARE per run as its runAll_eHist does.
// Usage: java -cp <classes>:<lib jars> LabVsJava counts.csv RUNS W EPS
import experiment.Experiment;
import experiment.LaplaceStream;
import java.io.BufferedReader;
import java.io.FileReader;
import java.util.ArrayList;
import mechanisms.Mechansim;
import mechanisms.RescueDP1D;

public final class LabVsJava {
    private LabVsJava() {}

    public static void main(String[] args) throws Exception {
        ArrayList<double[]> stream = new ArrayList<>();
        try (BufferedReader in = new BufferedReader(new FileReader(args[0]))) {
            String line = in.readLine(); // header
            while ((line = in.readLine()) != null) {
                String[] cells = line.split(",");
                double[] row = new double[cells.length - 1];
                for (int i = 1; i < cells.length; i++) {
                    row[i - 1] = Double.parseDouble(cells[i]);
                }
                stream.add(row);
            }
        }
        int runs = Integer.parseInt(args[1]);
        int w = Integer.parseInt(args[2]);
        double eps = Double.parseDouble(args[3]);
        Mechansim.TRUNCATE = false;
        RescueDP1D.USE_KALMAN_FILTER = true;
        LaplaceStream.USAGE_MODE = LaplaceStream.USAGE_MODE_RANDOM;
        int[] mechanisms = {Experiment.KalmanFilterPID_FAST_w, Experiment.UNIFROM, Experiment.SAMPLE,
            Experiment.BD, Experiment.BA, Experiment.RESCUE_DP_MD, Experiment.PEGASUS,
            Experiment.DSATWEVENT, Experiment.ADAPUB};
        long start = System.nanoTime();
        StringBuilder out = new StringBuilder("{");
        for (int i = 0; i < mechanisms.length; i++) {
            Mechansim m = Experiment.getInstance(mechanisms[i]);
            m.epsilon = eps;
            double mae = 0;
            double are = 0;
            for (int r = 0; r < runs; r++) {
                ArrayList<double[]> san = m.run(stream, w, eps);
                mae += Mechansim.mae(stream, san);
                are += Mechansim.are(stream, san);
                LaplaceStream.line();
            }
            out.append(i == 0 ? "" : ", ").append('"').append(m.name().replaceAll("\\s", ""))
                .append("\": [").append(mae / runs).append(", ").append(are / runs).append(']');
        }
        out.append(", \"mechanisms_s\": ").append((System.nanoTime() - start) / 1e9).append('}');
        System.out.println(out);
    }
}
