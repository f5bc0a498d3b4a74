// The server-side half of a connect attempt's cancel (worker/connect_plugin.py builds it into a jar that the
// worker's Spark Connect server loads as a command plugin).
//
// Spark Connect interrupts operations: a cancel by tag stops the Spark jobs started in the threads of the
// attempt's operations. A declarative pipeline's flows run in a thread pool Spark shares between pipeline
// runs, and a pool thread keeps the job tags of the run that created it, so a flow may carry another
// run's tags and outlive the cancel. Every SQL execution of a session is also tagged with that session's
// own job tag, which only the server can name: this command cancels every Spark job of the caller's
// session by it (the classic session's interruptAll). The session is the attempt's own.
package sparkyard;

import org.apache.spark.sql.connect.planner.SparkConnectPlanner;
import org.apache.spark.sql.connect.plugin.CommandPlugin;
import org.sparkproject.connect.protobuf.Any;

public final class InterruptSessionJobs implements CommandPlugin {
  public static final String TYPE_URL = "type.googleapis.com/sparkyard.InterruptSessionJobs";

  @Override
  public boolean process(byte[] command, SparkConnectPlanner planner) {
    try {
      if (!Any.parseFrom(command).getTypeUrl().equals(TYPE_URL)) {
        return false;  // another plugin's command
      }
    } catch (Exception e) {
      return false;
    }
    planner.session().interruptAll();
    return true;
  }
}
